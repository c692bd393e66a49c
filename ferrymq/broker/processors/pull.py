"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361: RocketMQ 5's DefaultLitePullConsumer, the same
request), with long polling.

Checks follow RocketMQ's order (broker readable, group, consumeEnable, topic, queue,
subscription). A pull that finds nothing and carries the SUSPEND flag is held: it waits on
:class:`PullWaiters` until a message for its queue is stored or its suspend time ends, and
is then answered from a fresh read (PULL_NOT_FOUND when nothing came).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.ha.reads import suggest_which_broker
from ferrymq.broker.message_filter import FilterRefused, MessageFilter, message_filter
from ferrymq.broker.protection import ConsumeProtection
from ferrymq.common.consumer_protocol import build_subscription
from ferrymq.common.protocol import Perm
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import PullMessageResponseHeader
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag
from ferrymq.store.results import GetResult, GetStatus


def response_code(status: GetStatus, requested_offset: int) -> int:
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY


HOLD_RECHECK_SECONDS = 5.0  # a held pull reads its queue again at least this often

# Reads that tell how far behind the head the group reads (caught up counts as 0).
_FALL_BEHIND_KNOWN = (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_OVERFLOW_ONE)


class PullProcessor:
    def __init__(self, ctx: BrokerContext, protection: ConsumeProtection,
                 pop_refusal: Callable[[str, str], str | None] | None = None,
                 read_refusal: Callable[[], str | None] | None = None) -> None:
        self.ctx = ctx
        self.protection = protection
        # broker/pop: the remark to refuse a classic pull with while the group POP-consumes the topic
        self.pop_refusal = pop_refusal
        # broker/ha: why this broker serves no reads now (a restarted broker in controller mode
        # before the controller said what it is: its log may hold what the group will cut)
        self.read_refusal = read_refusal

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        ctx = self.ctx
        header = PullMessageHeader.from_request(req)
        group, topic, queue_id, offset = header.consumer_group, header.topic, header.queue_id, header.queue_offset
        max_nums, sys_flag = header.max_msg_nums, header.sys_flag

        if not Perm.readable(ctx.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION, remark=f"the broker[{ctx.config.broker_name}] pulling message is forbidden")
        if self.read_refusal is not None and (refused := self.read_refusal()) is not None:
            return req.response(ResponseCode.NO_PERMISSION, remark=refused)
        group_config = ctx.groups.find_or_create(group)
        if group_config is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark=f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, remark=f"subscription group no permission, {group}")
        topic_config = ctx.topics.get(topic)
        if topic_config is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist, apply first please!")
        if not Perm.readable(topic_config.perm):
            return req.response(ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < topic_config.read_queue_nums:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                                       f"[{topic_config.read_queue_nums}] consumer:[{conn.remote_address[0]}]")

        if self.pop_refusal is not None:
            remark = self.pop_refusal(group, topic)
            if remark is not None:
                return req.response(ResponseCode.NO_PERMISSION, remark=remark)

        if sys_flag & PullSysFlag.SUBSCRIPTION:
            sub = build_subscription(topic, header.subscription, header.expression_type)
        else:
            sub = ctx.consumers.find_subscription(group, topic)
            if sub is None:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, remark="the consumer's subscription not exist")
            if sub.sub_version < header.sub_version:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, remark="the consumer's subscription not latest")

        if sys_flag & PullSysFlag.COMMIT_OFFSET and ctx.config.broker_id == 0:
            if header.commit_offset >= 0:
                ctx.offsets.commit(group, topic, queue_id, header.commit_offset)

        try:
            wanted = message_filter(sub, ctx.config.enable_property_filter)
        except FilterRefused as refused:
            return req.response(refused.code, remark=refused.remark)

        result = await ctx.store.get_messages(group, topic, queue_id, offset, max_nums, wanted.tags, wanted.record())
        code = response_code(result.status, offset)
        if result.status in _FALL_BEHIND_KNOWN:
            self.protection.record(group, topic, queue_id, result.fall_behind_bytes)
        if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PullSysFlag.SUSPEND:
            result, arrived_at = await self._hold(group, topic, queue_id, offset, max_nums, wanted,
                                                  header.suspend_timeout_millis)
            code = response_code(result.status, offset)
            if result.status in _FALL_BEHIND_KNOWN:
                self.protection.record(group, topic, queue_id, result.fall_behind_bytes)
            response = self._respond(req, result, code, group, topic,
                                     suggest_which_broker(ctx.config, group_config, result))
            ctx.pull_waiters.answered(arrived_at)  # wake latency, observed once the response is written
            return response
        return self._respond(req, result, code, group, topic, suggest_which_broker(ctx.config, group_config, result))

    async def _hold(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                    wanted: MessageFilter, suspend_millis: int) -> tuple[GetResult, float | None]:
        """The answer's read, and when the arrival that woke the pull was announced (None if
        none did: timeout, shutdown, a message stored before the pull was held)."""
        # Pulls start eagerly (common/eager.py), outside a task; the hold's timeout needs one:
        # this first suspension hands the pull over to its task.
        await asyncio.sleep(0)
        ctx = self.ctx
        if ctx.config.long_polling_enable:
            hold_seconds = suspend_millis / 1000
        else:
            hold_seconds = ctx.config.short_polling_time_mills / 1000
        deadline = time.monotonic() + hold_seconds
        while True:
            # At most HOLD_RECHECK_SECONDS at a time, then read again (RocketMQ's hold service sweep).
            remaining = deadline - time.monotonic()
            arrived_at = await ctx.pull_waiters.wait(topic, queue_id, offset, min(remaining, HOLD_RECHECK_SECONDS),
                                                     None if wanted.passes_all else wanted.wants)
            # Woken by an arrival, this reads what was appended a moment ago: the store reads
            # such recent data on the loop, not through the read pool (store/asyncio_store.py).
            result = await ctx.store.get_messages(group, topic, queue_id, offset, max_nums, wanted.tags,
                                                  wanted.record())
            if result.status is not GetStatus.OFFSET_OVERFLOW_ONE:
                return result, arrived_at  # something to answer (found, filtered out, moved...)
            if ctx.pull_waiters.closed or time.monotonic() >= deadline:
                return result, None

    def _respond(self, req: RemotingCommand, result: GetResult, code: int, group: str, topic: str,
                 suggest: int) -> RemotingCommand:
        body = None
        if code == ResponseCode.SUCCESS:
            body = result.body()
            self.ctx.stats.record_get(topic, result.message_count, len(body))
            if self.ctx.tracing.enabled:
                self.ctx.tracing.delivered_records(result.records, group=group, via="pull")
        return req.response(code, remark=result.status.name, body=body, ext_fields=PullMessageResponseHeader.fields_of(
            suggest_which_broker_id=suggest, next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset, max_offset=result.max_offset))
