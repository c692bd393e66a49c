"""Typed request headers that both the client and the broker speak (RocketMQ's
``protocol.header`` classes): one codec per header, used to build a request and to read it.

A header's fields travel as the request's custom (ext) fields, Java text each ("true",
decimal numbers; an absent optional field is left out). SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE carry SendMessageRequestHeaderV2, the same fields under one-letter
keys; SEND_MESSAGE carries the long names (docs/wire-format.md#send-headers).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from ferrymq.common.transaction_batches import SEND_HALF_MESSAGES
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import FIELD_BOOL, FIELD_INT, FIELD_LONG, FIELD_STR, HeaderSpec, RemotingCommand
from ferrymq.remoting.errors import HeaderFieldError

__all__ = ["MAX_RECONSUME_TIMES_VERSION", "PullMessageHeader", "PullSysFlag", "SendMessageHeader"]

# Clients older than this (RocketMQ V3_4_9) send no maxReconsumeTimes worth honouring.
MAX_RECONSUME_TIMES_VERSION = 121

# SendMessageRequestHeaderV2's one-letter keys for SendMessageRequestHeader's fields.
_SEND_V2_KEYS = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
    "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
    "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m", "bname": "n",
}
_SEND_V1_KEYS = {name: name for name in _SEND_V2_KEYS}
_SEND_NAME_OF = {key: name for name, key in _SEND_V2_KEYS.items()}
_SEND_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2,
                  SEND_HALF_MESSAGES)


def _send_spec(keys: dict[str, str]) -> HeaderSpec:
    """SendMessageRequestHeader's fields in SendMessageHeader's order (maxReconsumeTimes as text:
    it is read only from clients new enough to send it)."""
    return (
        (keys["producerGroup"], FIELD_STR, "", False), (keys["topic"], FIELD_STR, None, True),
        (keys["queueId"], FIELD_INT, -1, False), (keys["defaultTopic"], FIELD_STR, "", False),
        (keys["defaultTopicQueueNums"], FIELD_INT, 4, False), (keys["sysFlag"], FIELD_INT, 0, False),
        (keys["bornTimestamp"], FIELD_LONG, 0, False), (keys["flag"], FIELD_INT, 0, False),
        (keys["properties"], FIELD_STR, "", False), (keys["reconsumeTimes"], FIELD_INT, 0, False),
        (keys["unitMode"], FIELD_BOOL, False, False), (keys["maxReconsumeTimes"], FIELD_STR, None, False),
        (keys["batch"], FIELD_BOOL, False, False), (keys["bname"], FIELD_STR, None, False),
    )


_SEND_V1_SPEC, _SEND_V2_SPEC = _send_spec(_SEND_V1_KEYS), _send_spec(_SEND_V2_KEYS)


class PullSysFlag(enum.IntFlag):
    """PULL_MESSAGE's sysFlag bits (RocketMQ's PullSysFlag)."""

    COMMIT_OFFSET = 0x1  # commitOffset carries the group's offset to store
    SUSPEND = 0x2  # hold the pull (long polling) when nothing is there
    SUBSCRIPTION = 0x4  # subscription/expressionType carry the filter (else the heartbeat's)
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


@dataclass
class SendMessageHeader:
    """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (SendMessageRequestHeader)."""

    producer_group: str
    topic: str
    queue_id: int = -1  # -1: the broker picks one
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str = ""
    reconsume_times: int = 0
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    batch: bool = False
    broker_name: str | None = None  # bname (5.x clients)

    def to_fields(self, v2: bool = True) -> dict[str, object]:
        """The request's fields; ``v2``: under SendMessageRequestHeaderV2's one-letter keys."""
        fields: dict[str, object] = {
            "producerGroup": self.producer_group, "topic": self.topic, "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": self.default_topic_queue_nums, "queueId": self.queue_id,
            "sysFlag": self.sys_flag, "bornTimestamp": self.born_timestamp, "flag": self.flag,
            "properties": self.properties or None, "reconsumeTimes": self.reconsume_times,
            "unitMode": self.unit_mode, "maxReconsumeTimes": self.max_reconsume_times, "batch": self.batch,
            "bname": self.broker_name,
        }
        if v2:
            return {_SEND_V2_KEYS[name]: value for name, value in fields.items()}
        return fields

    @staticmethod
    def wire_names() -> tuple[str, ...]:
        """Every key its fields travel under, in either form."""
        return tuple(_SEND_V1_KEYS) + tuple(_SEND_V2_KEYS.values())

    @staticmethod
    def wire_key(code: int, name: str) -> str:
        """The key field ``name`` (SendMessageRequestHeader's long name) travels under in a request of ``code``."""
        return _SEND_V2_KEYS[name] if code in _SEND_V2_CODES else name

    @classmethod
    def from_request(cls, req: RemotingCommand) -> "SendMessageHeader":
        """Read either form (by the request code); a missing topic or a malformed number raises
        HeaderFieldError, which the server answers as a bad request. On the send path: one
        lookup per field, no intermediate dict."""
        v2 = req.code in _SEND_V2_CODES
        k = _SEND_V2_KEYS if v2 else _SEND_V1_KEYS
        try:
            *head, max_times, batch, broker_name = req.header_values(_SEND_V2_SPEC if v2 else _SEND_V1_SPEC)
            if max_times is not None:  # its text: honoured only from clients new enough to send it
                max_times = req.get_int(k["maxReconsumeTimes"]) if req.version >= MAX_RECONSUME_TIMES_VERSION else None
            return cls(*head, max_times, batch, broker_name)
        except HeaderFieldError as e:
            name = _SEND_NAME_OF.get(e.field)
            if name is None or k is _SEND_V1_KEYS:
                raise
            raise HeaderFieldError(e.field, f"{e} ({name})") from None  # Java names only the short key


@dataclass
class PullMessageHeader:
    """PULL_MESSAGE (PullMessageRequestHeader)."""

    TOPIC_FIELDS: ClassVar[tuple[str, ...]] = ("topic",)
    CONSUMER_GROUP_FIELDS: ClassVar[tuple[str, ...]] = ("consumerGroup",)

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int = 32
    sys_flag: PullSysFlag = PullSysFlag(0)
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str = "TAG"

    @staticmethod
    def wire_names() -> tuple[str, ...]:
        return tuple(spec[0] for spec in _PULL_SPEC)

    def to_fields(self) -> dict[str, object]:
        return {
            "consumerGroup": self.consumer_group, "topic": self.topic, "queueId": self.queue_id,
            "queueOffset": self.queue_offset, "maxMsgNums": self.max_msg_nums, "sysFlag": int(self.sys_flag),
            "commitOffset": self.commit_offset, "suspendTimeoutMillis": self.suspend_timeout_millis,
            "subscription": self.subscription, "subVersion": self.sub_version, "expressionType": self.expression_type,
        }

    @classmethod
    def from_request(cls, req: RemotingCommand) -> "PullMessageHeader":
        (group, topic, queue_id, queue_offset, max_nums, sys_flag, commit_offset, suspend_millis, subscription,
         sub_version, expression_type) = req.header_values(_PULL_SPEC)
        return cls(group, topic, queue_id, queue_offset, max(1, max_nums), PullSysFlag(sys_flag), commit_offset,
                   suspend_millis, subscription, sub_version, expression_type)


# PullMessageRequestHeader's fields in PullMessageHeader's order.
_PULL_SPEC: HeaderSpec = (
    ("consumerGroup", FIELD_STR, None, True), ("topic", FIELD_STR, None, True), ("queueId", FIELD_INT, None, True),
    ("queueOffset", FIELD_LONG, None, True), ("maxMsgNums", FIELD_INT, 32, False), ("sysFlag", FIELD_INT, 0, False),
    ("commitOffset", FIELD_LONG, -1, False), ("suspendTimeoutMillis", FIELD_LONG, 15_000, False),
    ("subscription", FIELD_STR, None, False), ("subVersion", FIELD_LONG, 0, False),
    ("expressionType", FIELD_STR, "TAG", False),
)
