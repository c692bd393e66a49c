"""Bodies of the consumer-group calls (queue locks, connection lists, consume stats, offset
resets) and the subscription expression both sides parse.

Field names follow RocketMQ 4.9 (wire facts 4.5, 4.8, 4.12); ``Map<MessageQueue, X>`` fields
travel with fastjson's object keys, which :class:`JsonModel` writes and reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.json_model import JsonModel
from ferrymq.common.protocol import MessageQueue, SubscriptionData


def build_subscription(topic: str, expression: str | None) -> SubscriptionData:
    """A TAG subscription from ``*`` or ``TagA || TagB`` (RocketMQ's FilterAPI): tags trimmed,
    codeSet = their Java hashCodes, which is what the broker filters ConsumeQueue entries by."""
    expression = (expression or "*").strip()
    if expression in ("", "*"):
        return SubscriptionData(topic=topic, sub_string="*")
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(topic=topic, sub_string=expression, tags_set=tags,
                            code_set=[java_string_hash(t) for t in tags])


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
