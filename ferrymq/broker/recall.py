"""Recalling a timer message before it fires (docs/timers.md#recall).

A timer message's send answer carries a *recall handle* (RocketMQ 5.3.2's ``HandleV1``: the
words ``v1 <topic> <brokerName> <due ms + 1> <message id>`` joined by spaces, URL-safe Base64).
Recalling stores a *recall marker* under the timer topic, due in the same slot as the message it
cancels and carrying ``TIMER_DEL_UNIQKEY``; like any timer record it goes through the CommitLog,
so it is durable, replicated and re-dispatched by recovery. When the slot fires, the markers are
read first and the messages they name are skipped; a marker itself is never delivered.

Apache 5.3.1 has no RECALL_MESSAGE but honours the same marker sent by a producer (a message
with ``TIMER_DEL_UNIQKEY`` = the message id and ``TIMER_DELIVER_MS`` = its due time); 5.3.2 names
the message as ``<topic>+<message id>``. Both forms are honoured here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ferrymq.broker.context import BrokerContext
from ferrymq.common.message import MessageExt, Prop
from ferrymq.common.recall_handle import INVALID_HANDLE, RecallHandle, delete_key
from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX, TIMER_TOPIC, Perm
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.results import PutStatus

RECALL_TAG = "_RECALL_TAG_"
# a put that stored the marker (the flush or a slave may lag): recalled, as Apache answers
STORED = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE)


def handle_for(msg: MessageExt, broker_name: str) -> str | None:
    """The recall handle of a message just stored under the timer topic; None for any other
    (a retry topic's timer included, as Apache)."""
    if msg.topic != TIMER_TOPIC:  # every send asks: the common answer first, no property lookups
        return None
    due = msg.properties.get(Prop.TIMER_OUT_MS)
    real_topic = msg.properties.get(Prop.REAL_TOPIC)
    uniq = msg.properties.get(Prop.UNIQ_KEY)
    if due is None or not real_topic or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or not uniq \
            or is_recall_marker(msg):
        return None
    try:
        return RecallHandle(real_topic, broker_name, str(int(due) + 1), uniq).encode()
    except ValueError:
        return None


def is_recall_marker(msg: MessageExt) -> bool:
    return Prop.TIMER_DEL_UNIQKEY in msg.properties


def is_recalled(msg: MessageExt, recalled: set[str]) -> bool:
    """Whether a marker of ``recalled`` (their TIMER_DEL_UNIQKEY values) names ``msg``."""
    uniq = msg.properties.get(Prop.UNIQ_KEY)
    if not uniq or not recalled:
        return False
    topic = msg.properties.get(Prop.REAL_TOPIC, msg.topic)
    return uniq in recalled or delete_key(topic, uniq) in recalled


@dataclass(frozen=True)
class RecallOutcome:
    code: int
    remark: str = ""
    msg_id: str = ""

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS


class RecallService:
    """Apache 5.3.2's RecallMessageProcessor: the checks in its order, its codes and remarks."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.recalls = 0  # markers stored

    def _refusal(self, topic: str, handle: RecallHandle | None) -> RecallOutcome | None:
        ctx = self.ctx
        config = ctx.config
        if not config.recall_message_enable:
            return RecallOutcome(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if config.is_slave:
            return RecallOutcome(ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available")
        if not Perm.writeable(config.broker_permission) and not config.allow_recall_when_broker_not_writeable:
            return RecallOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, broker service not available")
        if ctx.topics.get(topic) is None:
            return RecallOutcome(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        if handle is None:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, INVALID_HANDLE)
        if handle.topic != topic:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != ctx.config.broker_name:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available")
        due = handle.due_ms
        left = -1 if due is None else due + 1 - int(time.time() * 1000)
        if left <= 0 or left >= ctx.store_config.timer_max_delay_sec * 1000:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        return None

    async def recall(self, topic: str, handle_text: str, *, producer_group: str | None = None,
                     born_host: tuple[str, int] = ("0.0.0.0", 0)) -> RecallOutcome:
        handle = RecallHandle.decode(handle_text)
        refusal = self._refusal(topic, handle)
        if refusal is not None:
            return refusal
        assert handle is not None and handle.due_ms is not None
        if not self.ctx.store.timers_enabled:  # Apache's put fails: WHEEL_TIMER_NOT_ENABLE
            return RecallOutcome(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
        marker = self._marker(handle, producer_group, born_host)
        result = await self.ctx.store.put_message(marker)
        if result.status not in STORED:
            return RecallOutcome(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
        self.recalls += 1
        self.ctx.stats.record_put(TIMER_TOPIC, result.msg_num, result.wrote_bytes)
        return RecallOutcome(ResponseCode.SUCCESS, msg_id=handle.message_id)

    def _marker(self, handle: RecallHandle, producer_group: str | None, born_host: tuple[str, int]) -> MessageExt:
        """The timer record that cancels ``handle``'s message: filed under that message's slot."""
        now = int(time.time() * 1000)
        props = {
            Prop.TAGS: RECALL_TAG,
            Prop.TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
            Prop.UNIQ_KEY: handle.message_id,
            Prop.TIMER_DELIVER_MS: handle.timestamp,
            Prop.TIMER_OUT_MS: str(handle.due_ms),
            Prop.REAL_TOPIC: handle.topic,
            Prop.REAL_QID: "0",
        }
        if producer_group:
            props[Prop.PGROUP] = producer_group
        return MessageExt(topic=TIMER_TOPIC, body=b"0", properties=props, queue_id=0, born_timestamp=now,
                          born_host=born_host, store_host=self.ctx.store_host)
