"""Bodies of the consumer-group calls (queue locks, connection lists, consume stats, offset
resets, the offset table and message request modes a slave copies) and the subscription
expression both sides parse.

Field names follow RocketMQ 4.9 (docs/wire-format.md#client-registry, #queue-locks, #consume-stats); ``Map<MessageQueue, X>`` fields
travel with fastjson's object keys, which :class:`JsonModel` writes and reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.json_model import JsonModel
from ferrymq.common.protocol import DataVersion, MessageQueue, SubscriptionData


def build_subscription(topic: str, expression: str | None, expression_type: str = "TAG") -> SubscriptionData:
    """A subscription as RocketMQ's FilterAPI builds it. TAG: ``*`` or ``TagA || TagB``, tags
    trimmed, codeSet = their Java hashCodes (what the broker filters ConsumeQueue entries by).
    Any other type (SQL92) keeps the expression as it is, for the broker to evaluate."""
    if (expression_type or "TAG").upper() != "TAG":
        return SubscriptionData(topic=topic, sub_string=expression or "", expression_type=expression_type.upper())
    expression = (expression or "*").strip()
    if expression in ("", "*"):
        return SubscriptionData(topic=topic, sub_string="*")
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(topic=topic, sub_string=expression, tags_set=tags,
                            code_set=[java_string_hash(t) for t in tags])


def subscription_of(topic: str, expression: str = "*", sql: str | None = None) -> SubscriptionData:
    """A consumer's subscription: tags, or a SQL92 selector checked here first so that a typo
    fails at ``subscribe`` rather than on the broker (ValueError saying where)."""
    if sql is None:
        return build_subscription(topic, expression)
    from ferrymq.filter.sql92 import compile_selector

    compile_selector(sql)
    return build_subscription(topic, sql, "SQL92")


@dataclass
class CheckClientRequestBody(JsonModel):
    """CHECK_CLIENT_CONFIG: a consumer asks whether the broker can filter its subscription."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None


@dataclass
class LockBatchRequestBody(JsonModel):
    consumer_group: str = ""
    client_id: str = ""
    mq_set: list[MessageQueue] = field(default_factory=list)


@dataclass
class LockBatchResponseBody(JsonModel):
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list, metadata={"json": "lockOKMQSet"})


# Java has a separate UnlockBatchRequestBody class with the very same three fields.
UnlockBatchRequestBody = LockBatchRequestBody


@dataclass
class ClientConnection(JsonModel):
    """One entry of ConsumerConnection.connectionSet (Java ``Connection``)."""

    client_id: str = ""
    client_addr: str = ""
    language: str = "JAVA"
    version: int = 0
    # FerryMQ's additions (Java readers ignore them): "remoting" (4.x), "gRPC v2" (5.x) or "POP";
    # the client's own version string (5.x clients send e.g. "5.0.7"); its topics -> expressions
    protocol: str | None = None
    client_version: str | None = None
    subscriptions: dict[str, str] | None = None


@dataclass
class ConsumerConnection(JsonModel):
    connection_set: list[ClientConnection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclass
class OffsetWrapper(JsonModel):
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass
class ConsumeStats(JsonModel):
    """GET_CONSUME_STATS (208). ``consumeEnable`` is FerryMQ's addition (None from RocketMQ
    brokers); Java readers ignore it."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0
    consume_enable: bool | None = None

    def total_lag(self) -> int:
        return sum(w.lag for w in self.offset_table.values())


@dataclass
class ResetOffsetBody(JsonModel):
    offset_table: dict[MessageQueue, int] = field(default_factory=dict)


@dataclass
class ConsumerOffsetSerializeWrapper(JsonModel):
    """The consumer offset table, ``topic@group`` -> queue id -> offset, with its data version:
    consumerOffset.json and GET_ALL_CONSUMER_OFFSET's answer (43). A 5.x slave adopts the
    version (its SlaveSynchronize fails without one); 4.x bodies have none (None here)."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)
    data_version: DataVersion | None = None


@dataclass
class SetMessageRequestModeRequestBody(JsonModel):
    """One group's consumption mode on a topic (RocketMQ 5): ``PULL`` or ``POP``."""

    topic: str = ""
    consumer_group: str = ""
    mode: str = "PULL"
    pop_share_queue_num: int = 0


@dataclass
class MessageRequestModeSerializeWrapper(JsonModel):
    """GET_ALL_MESSAGE_REQUEST_MODE's answer (402, RocketMQ 5): topic -> group -> mode, what a
    5.x slave copies from its master."""

    message_request_mode_map: dict[str, dict[str, SetMessageRequestModeRequestBody]] = field(default_factory=dict)
