"""Consumer send-back (CONSUMER_SEND_MSG_BACK, 36): failed messages to retry, then dead letter.

A consumer that failed a message asks the broker to redeliver it later. The broker finds the
message by its physical offset and stores a copy in ``%RETRY%<group>`` through the delay
schedule (level ``3 + reconsumeTimes`` unless the consumer asked for one: 10 s, 30 s, 1 m, ...),
with reconsumeTimes + 1 and the original topic and id in RETRY_TOPIC / ORIGIN_MESSAGE_ID. A
message that used up maxReconsumeTimes (or is sent back with a negative level) goes to
``%DLQ%<group>`` instead, undelayed, where it waits for a human (docs/wire-format.md#retry-and-dlq).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.schedule import ScheduleMessageService, divert_to_schedule
from ferrymq.common.message import MessageExt, Prop, decode_record
from ferrymq.common.protocol import DLQ_GROUP_TOPIC_PREFIX, Perm, dlq_topic, retry_topic
from ferrymq.remoting.codes import ResponseCode


log = logging.getLogger(__name__)

DLQ_NUMS_PER_GROUP = 1


@dataclass
class SendBackRequest:
    group: str
    offset: int  # physical CommitLog offset of the consumed message
    delay_level: int  # 0: broker picks 3 + reconsumeTimes; < 0: straight to the DLQ
    max_reconsume_times: int | None  # None: the group's retryMaxTimes
    reconsume_times: int | None = None  # consumed how often already; None: as the stored message says (POP: attempts - 1)


@dataclass
class SendBackResult:
    code: int
    remark: str | None = None
    topic: str | None = None  # where the copy went (retry or DLQ topic)


class RetryService:
    def __init__(self, ctx: BrokerContext, schedule: ScheduleMessageService) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.sent_back = 0
        self.dead_lettered = 0

    async def send_back(self, req: SendBackRequest) -> SendBackResult:
        ctx = self.ctx
        group_config = ctx.groups.find_or_create(req.group)
        if group_config is None:
            return SendBackResult(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {req.group}")
        if not Perm.writeable(ctx.config.broker_permission):
            return SendBackResult(ResponseCode.NO_PERMISSION,
                                  f"the broker[{ctx.config.broker_name}] sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            return SendBackResult(ResponseCode.SUCCESS)  # the group wants no retries: dropped

        record = await ctx.store.look_message(req.offset)
        if record is None:
            return SendBackResult(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {req.offset}")
        original = decode_record(record)[0]

        max_times = req.max_reconsume_times if req.max_reconsume_times is not None else group_config.retry_max_times
        times = req.reconsume_times if req.reconsume_times is not None else original.reconsume_times
        props = dict(original.properties)
        props.setdefault(Prop.RETRY_TOPIC, original.topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, original.client_msg_id)
        props.pop(Prop.DELAY, None)
        copy = MessageExt(topic="", body=original.body, flag=original.flag, properties=props, sys_flag=original.sys_flag,
                          born_timestamp=original.born_timestamp, born_host=original.born_host,
                          store_host=ctx.store_host, reconsume_times=times + 1)
        if times >= max_times or req.delay_level < 0:
            copy.topic = dlq_topic(req.group)
            copy.queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            ctx.topics.ensure(copy.topic, DLQ_NUMS_PER_GROUP, Perm.READ_WRITE)
            log.info("message %s of group %s failed %d times (max %d): stored in %s", copy.properties[Prop.ORIGIN_MESSAGE_ID],
                     req.group, times + 1, max_times, copy.topic)
        else:
            copy.topic = retry_topic(req.group)
            config = ctx.topics.ensure(copy.topic, group_config.retry_queue_nums, Perm.READ_WRITE)
            if not Perm.writeable(config.perm):
                return SendBackResult(ResponseCode.NO_PERMISSION, f"the topic[{copy.topic}] sending message is forbidden")
            copy.queue_id = random.randrange(max(1, config.write_queue_nums))
            copy.delay_level = req.delay_level or 3 + times
        target = copy.topic
        if copy.delay_level > 0:
            divert_to_schedule(copy, self.schedule.level_count)
        result = await ctx.store.put_message(copy)
        if not result.ok:
            return SendBackResult(ResponseCode.SYSTEM_ERROR, result.remark or result.status.name)
        if target.startswith(DLQ_GROUP_TOPIC_PREFIX):
            self.dead_lettered += 1
        else:
            self.sent_back += 1
        ctx.stats.record_put(target, 1, result.wrote_bytes)
        return SendBackResult(ResponseCode.SUCCESS, topic=target)
