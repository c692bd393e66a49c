"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and FerryMQ's
SEND_HALF_MESSAGES (a batch of half messages: ferrymq/common/transaction_batches.py).

Checks the topic (creating it from an inheritable default topic when allowed), picks the
queue, turns the request into store records and answers once the store's flush policy is
met. Response headers are always complete: the Java client reads msgId, queueId,
queueOffset, MSG_REGION and TRACE_ON from every successful answer.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from ferrymq.broker.batch_timers import SPLIT_PROPS, header_delay_refusal, merged_result, puts_of, split_batch
from ferrymq.broker.context import BrokerContext
from ferrymq.broker.flow_control import send_refusal
from ferrymq.broker.recall import handle_for
from ferrymq.broker.schedule import ScheduleMessageService, divert_to_schedule, is_delayable
from ferrymq.broker.timer_send import TIMER_REQUEST_PROPS, TimerRefusal, asks_for_timer, divert_to_timer
from ferrymq.broker.topic_config_manager import FORBIDDEN_SEND_TOPICS
from ferrymq.broker.transactions import TransactionService, divert_to_half, is_transactional
from ferrymq.common.message import MessageExt, Prop, SysFlag, batch_messages, decode_properties
from ferrymq.common.protocol import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, Perm, dlq_topic
from ferrymq.common.transaction_batches import SEND_HALF_MESSAGES
from ferrymq.common.validators import topic_error
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import SendMessageResponseHeader
from ferrymq.remoting.request_headers import SendMessageHeader
from ferrymq.store.results import AppendResult, PutStatus

log = logging.getLogger(__name__)

PUT_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}


# A single send whose properties name none of these is stored as sent: each of the three
# diversions below (a half message, a timer, a delay level) starts from one of them.
_DIVERTING_PROPS = frozenset((Prop.TRAN_MSG, Prop.DELAY, *TIMER_REQUEST_PROPS))


@dataclass(slots=True)
class SendOutcome:
    """How a send ended: the answer's code and remark; for a send the store took, its result
    (``ok`` false: stored, but its flush or replication wait failed), the queue it went to and
    a timer message's recall handle."""

    code: int
    remark: str | None = None
    result: AppendResult | None = None
    queue_id: int = 0
    recall_handle: str | None = None


class SendProcessor:
    def __init__(self, ctx: BrokerContext, schedule: ScheduleMessageService, transactions: TransactionService) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.transactions = transactions

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """A remoting send: its header read, the send made, the answer written as Java's is."""
        header = SendMessageHeader.from_request(req)
        out = await self.send(req.code, header, decode_properties(header.properties), req.body or b"",
                              conn.remote_address, req.received_at)
        result = out.result
        if result is None or not result.ok:
            return req.response(out.code, remark=out.remark)
        config = self.ctx.config
        return req.text_response(out.code, SendMessageResponseHeader.text_of(
            msg_id=",".join(result.msg_ids), queue_id=out.queue_id, queue_offset=result.queue_offset,
            region=config.region_id, trace_on=config.trace_on, recall_handle=out.recall_handle))

    async def send(self, code: int, header: SendMessageHeader, batch_props: dict[str, str], body: bytes,
                   born_at: tuple[str, int], received_at: float) -> SendOutcome:
        """A send of ``code`` (SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE or SEND_HALF_MESSAGES) as
        ``header`` describes it, whatever protocol brought it: the remoting answer above, or a
        5.x client's SendMessage (grpc/service.py), which builds the header and properties
        itself instead of writing and reading them as text. ``batch_props``: the header's
        properties, decoded (this call adds the broker's own to them); ``born_at``: the
        producer's address; ``received_at``: ``time.monotonic()`` when the request was read (0:
        unknown), for admission control."""
        ctx = self.ctx
        topic = header.topic
        error = topic_error(topic)
        if error:
            return SendOutcome(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] is invalid: {error}")
        if topic in FORBIDDEN_SEND_TOPICS:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        if not Perm.writeable(ctx.config.broker_permission):
            return SendOutcome(ResponseCode.NO_PERMISSION,
                               f"the broker[{ctx.config.broker_name}] sending message is forbidden")

        queued_ms = int((time.monotonic() - received_at) * 1000) if received_at else 0
        busy = send_refusal(ctx.store.write_backlog(), ctx.config, queued_ms)
        if busy is not None:
            ctx.stats.record_busy()
            return SendOutcome(ResponseCode.SYSTEM_BUSY, busy)

        topic_config = ctx.topics.get(topic)
        if topic_config is None:
            topic_config = ctx.topics.create_in_send(
                topic, header.default_topic, header.default_topic_queue_nums, 0)
            if topic_config is None:
                return SendOutcome(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not Perm.writeable(topic_config.perm):
            return SendOutcome(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")

        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = int(random.random() * max(1, topic_config.write_queue_nums))  # (randrange: three calls more)
        if queue_id >= max(topic_config.read_queue_nums, topic_config.write_queue_nums):
            return SendOutcome(ResponseCode.SYSTEM_ERROR,
                               f"request queueId[{queue_id}] is illegal, {topic_config.describe()} "
                               f"Producer: {born_at[0]}")

        wait = batch_props.pop(Prop.WAIT, None) != "false"  # honoured, not stored (as 4.9.1+)
        batch_props[Prop.CLUSTER] = ctx.config.broker_cluster_name
        # stamped on every message as Apache does: a consumer's trace hook reads them, and skips
        # a message whose TRACE_ON is false (docs/trace.md#what-lands-in-the-topic)
        batch_props[Prop.MSG_REGION] = ctx.config.region_id
        batch_props[Prop.TRACE_ON] = "true" if ctx.config.trace_on else "false"
        born_host = (born_at[0], born_at[1])
        born_timestamp = header.born_timestamp or int(time.time() * 1000)

        recall_handle = None
        halves = code == SEND_HALF_MESSAGES
        batch = halves or code == RequestCode.SEND_BATCH_MESSAGE
        if halves and ctx.config.reject_transaction_message:
            return SendOutcome(ResponseCode.NO_PERMISSION,
                               f"the broker[{ctx.config.broker_name}] sending transaction message is forbidden")
        if batch:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic)
            try:
                msgs, may_split, waits = batch_messages(
                    topic, body, batch_props, SPLIT_PROPS, queue_id, header.sys_flag, born_timestamp, born_host,
                    ctx.store_host, header.reconsume_times)
            except ValueError as e:
                return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {e}")
            if not msgs:
                return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
            refusal = header_delay_refusal(batch_props, ctx.store_config)
            if refusal is not None:
                return SendOutcome(refusal.code, refusal.remark)
            wait = wait and waits  # a message of the batch saying WAIT=false answers the batch at once
            if halves:  # half messages until the producer commits them; a timer waits for the commit
                self.transactions.ensure_topics()
                for m in msgs:
                    m.properties[Prop.TRAN_MSG], m.properties[Prop.PGROUP] = "true", header.producer_group
                    divert_to_half(m)
                result = await ctx.store.put_messages(msgs, wait=wait)
            elif not may_split or SysFlag.transaction_type(header.sys_flag):
                # the batch as sent (the fast path; a transactional batch is the store's to refuse)
                result = await ctx.store.put_messages(msgs, wait=wait)
            else:  # messages asking for a timer or a delay level wait on their own (docs/timers.md#batches)
                split = split_batch(msgs, ctx.store_config, self.schedule.level_count, int(time.time() * 1000))
                if isinstance(split, TimerRefusal):
                    return SendOutcome(split.code, split.remark)
                if split.timed:
                    result = merged_result(split, await ctx.store.put_group(puts_of(split), all_or_nothing=True, wait=wait))
                else:  # none waits after all (a timer due already, or the words in a body)
                    result = await ctx.store.put_messages(msgs, wait=wait)
        else:
            msg = MessageExt(topic, body, header.flag, batch_props, queue_id, 0, 0, header.sys_flag,
                             born_timestamp, born_host, 0, ctx.store_host, header.reconsume_times)  # (positional: cheaper)
            dlq = self._dead_letter_target(header, msg) if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else None
            if dlq is not None:
                msg.topic, msg.queue_id = dlq, 0
                msg.delay_level = 0  # a dead letter waits for a human, not a timer
            topic, queue_id = msg.topic, msg.queue_id
            if _DIVERTING_PROPS.isdisjoint(batch_props):
                pass  # the common send: no half message, timer or delay level to look at
            elif is_transactional(msg):  # a half message until the producer commits it
                if ctx.config.reject_transaction_message:
                    return SendOutcome(ResponseCode.NO_PERMISSION,
                                       f"the broker[{ctx.config.broker_name}] sending transaction message is forbidden")
                self.transactions.ensure_topics()
                divert_to_half(msg)
            elif asks_for_timer(msg):  # held in rmq_sys_wheel_timer until due (docs/timers.md)
                refusal = divert_to_timer(msg, ctx.store_config, int(time.time() * 1000))
                if refusal is not None:
                    return SendOutcome(refusal.code, refusal.remark)
            elif is_delayable(msg):  # held in SCHEDULE_TOPIC_XXXX until due (docs/wire-format.md#send-processing, step 6)
                divert_to_schedule(msg, self.schedule.level_count)
            result = await ctx.store.put_message(msg, wait=wait)
            recall_handle = handle_for(msg, ctx.config.broker_name)  # a timer message's (docs/timers.md#recall)

        answer = PUT_STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
        stored = result.ok
        ctx.stats.record_put(topic, result.msg_num if stored else 0, result.wrote_bytes)
        if stored and ctx.tracing.enabled:
            ctx.tracing.stored(msgs if batch else [msg], queue_id=queue_id,
                               first_offset=result.queue_offset, msg_ids=result.msg_ids)
        # a put not stored is answered without offsets (one stored whose flush or replication wait failed keeps them)
        return SendOutcome(answer, None if stored else result.remark or result.status.name, result, queue_id,
                           recall_handle)

    def _dead_letter_target(self, header: SendMessageHeader, msg: MessageExt) -> str | None:
        """A retry-topic message that used up its reconsume budget goes to the group's DLQ."""
        if not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or msg.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return None
        group = msg.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        group_config = self.ctx.groups.find_or_create(group)
        max_times = group_config.retry_max_times if group_config else 16
        if header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if msg.reconsume_times < max_times:
            return None
        target = dlq_topic(group)
        self.ctx.topics.ensure(target, 1, Perm.READ_WRITE)
        log.info("message for %s exceeded %d reconsume times; stored in %s", msg.topic, max_times, target)
        return target
