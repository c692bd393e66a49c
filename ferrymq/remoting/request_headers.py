"""Typed request headers that both the client and the broker speak (RocketMQ's
``protocol.header`` classes): one codec per header, used to build a request and to read it.

A header's fields travel as the request's custom (ext) fields, Java text each ("true",
decimal numbers; an absent optional field is left out). SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE carry SendMessageRequestHeaderV2, the same fields under one-letter
keys; SEND_MESSAGE carries the long names (wire facts 3.2).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
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
_SEND_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


class PullSysFlag(enum.IntFlag):
    """PULL_MESSAGE's sysFlag bits (RocketMQ's PullSysFlag)."""

    COMMIT_OFFSET = 0x1  # commitOffset carries the group's offset to store
    SUSPEND = 0x2  # hold the pull (long polling) when nothing is there
    SUBSCRIPTION = 0x4  # subscription/expressionType carry the filter (else the heartbeat's)
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


class _Fields:
    """Typed reads of a request's fields under the names a header's codec gives them."""

    def __init__(self, req: RemotingCommand, keys: dict[str, str] | None = None) -> None:
        self.req = req
        self.keys = keys or {}

    def _read(self, getter, name: str, *args, **kwargs):
        key = self.keys.get(name, name)
        try:
            return getter(key, *args, **kwargs)
        except HeaderFieldError as e:
            if key == name:
                raise
            raise HeaderFieldError(key, f"{e} ({name})") from None  # Java names only the short key

    def str(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        return self._read(self.req.get_str, name, default, required=required)

    def int(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        return self._read(self.req.get_int, name, default, required=required)

    def long(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        return self._read(self.req.get_long, name, default, required=required)

    def bool(self, name: str, default: bool = False) -> bool:
        return self._read(self.req.get_bool, name, default)


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

    @classmethod
    def from_request(cls, req: RemotingCommand) -> "SendMessageHeader":
        """Read either form (by the request code); a missing topic or a malformed number raises
        HeaderFieldError, which the server answers as a bad request."""
        f = _Fields(req, _SEND_V2_KEYS if req.code in _SEND_V2_CODES else None)
        max_times = None
        if req.version >= MAX_RECONSUME_TIMES_VERSION and f.str("maxReconsumeTimes"):
            max_times = f.int("maxReconsumeTimes")
        return cls(
            producer_group=f.str("producerGroup", ""), topic=f.str("topic", required=True),
            queue_id=f.int("queueId", -1), default_topic=f.str("defaultTopic", ""),
            default_topic_queue_nums=f.int("defaultTopicQueueNums", 4), sys_flag=f.int("sysFlag", 0),
            born_timestamp=f.long("bornTimestamp", 0), flag=f.int("flag", 0), properties=f.str("properties", ""),
            reconsume_times=f.int("reconsumeTimes", 0), unit_mode=f.bool("unitMode"), max_reconsume_times=max_times,
            batch=f.bool("batch"), broker_name=f.str("bname"),
        )


@dataclass
class PullMessageHeader:
    """PULL_MESSAGE (PullMessageRequestHeader)."""

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

    def to_fields(self) -> dict[str, object]:
        return {
            "consumerGroup": self.consumer_group, "topic": self.topic, "queueId": self.queue_id,
            "queueOffset": self.queue_offset, "maxMsgNums": self.max_msg_nums, "sysFlag": int(self.sys_flag),
            "commitOffset": self.commit_offset, "suspendTimeoutMillis": self.suspend_timeout_millis,
            "subscription": self.subscription, "subVersion": self.sub_version, "expressionType": self.expression_type,
        }

    @classmethod
    def from_request(cls, req: RemotingCommand) -> "PullMessageHeader":
        f = _Fields(req)
        return cls(
            consumer_group=f.str("consumerGroup", required=True), topic=f.str("topic", required=True),
            queue_id=f.int("queueId", required=True), queue_offset=f.long("queueOffset", required=True),
            max_msg_nums=max(1, f.int("maxMsgNums", 32)), sys_flag=PullSysFlag(f.int("sysFlag", 0)),
            commit_offset=f.long("commitOffset", -1), suspend_timeout_millis=f.long("suspendTimeoutMillis", 15_000),
            subscription=f.str("subscription"), sub_version=f.long("subVersion", 0),
            expression_type=f.str("expressionType") or "TAG",
        )
