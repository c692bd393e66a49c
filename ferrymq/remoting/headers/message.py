"""The answers to SEND and PULL, and the reply pushed to a requester (docs/wire-format.md#typed-headers).
The requests of SEND and PULL are in ferrymq/remoting/request_headers.py (their hot read path)."""

from __future__ import annotations

from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire


@header
class SendMessageResponseHeader(Header):
    """SEND_MESSAGE(_V2) / SEND_BATCH_MESSAGE / SEND_REPLY_MESSAGE(_V2)'s answer (None: absent)."""

    msg_id: str = wire("msgId", default="")
    queue_id: int | None = wire("queueId", INT)
    queue_offset: int | None = wire("queueOffset", LONG)
    region: str | None = wire("MSG_REGION")
    trace_on: bool | None = wire("TRACE_ON", BOOL)
    recall_handle: str | None = wire("recallHandle")  # a timer message's (RocketMQ 5.3.2, docs/timers.md#recall)


@header
class PullMessageResponseHeader(Header):
    """PULL_MESSAGE's answer (None: absent, the reader keeps its own position)."""

    suggest_which_broker_id: int | None = wire("suggestWhichBrokerId", LONG)
    next_begin_offset: int | None = wire("nextBeginOffset", LONG)
    min_offset: int = wire("minOffset", LONG, 0)
    max_offset: int = wire("maxOffset", LONG, 0)


@header
class ReplyMessageHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (ReplyMessageRequestHeader): a reply's fields, broker to requester."""

    producer_group: str | None = wire("producerGroup", group="producer")
    topic: str = wire("topic", default="")
    default_topic: str | None = wire("defaultTopic")
    default_topic_queue_nums: int | None = wire("defaultTopicQueueNums", INT)
    queue_id: int = wire("queueId", INT, 0)
    sys_flag: int = wire("sysFlag", INT, 0)
    born_timestamp: int = wire("bornTimestamp", LONG, 0)
    flag: int = wire("flag", INT, 0)
    properties: str = wire("properties", default="")
    reconsume_times: int = wire("reconsumeTimes", INT, 0)
    unit_mode: bool = wire("unitMode", BOOL, False)
    born_host: str | None = wire("bornHost")
    store_host: str | None = wire("storeHost")
    store_timestamp: int = wire("storeTimestamp", LONG, 0)


@header
class RecallMessageHeader(Header):
    """RECALL_MESSAGE (RocketMQ 5.3.2's RecallMessageRequestHeader)."""

    producer_group: str | None = wire("producerGroup", group="producer")
    topic: str = wire("topic", required=True, topic=True)
    recall_handle: str = wire("recallHandle", required=True)


@header
class RecallMessageResponseHeader(Header):
    """RECALL_MESSAGE's answer: the recalled message's id (None: a refusal, left out)."""

    msg_id: str | None = wire("msgId")
    region: str | None = wire("MSG_REGION")
