"""Whether a POP receive is served: its limits (as RocketMQ's broker and proxy set them), the
broker's and the group's permissions, and the rule that a group's queues are consumed by POP
or by classic (pull/push) consumers, not both."""

from __future__ import annotations

from ferrymq.broker.consumer_manager import ConsumerManager
from ferrymq.broker.context import BrokerContext
from ferrymq.broker.pop.outcomes import PopResult, PopStatus
from ferrymq.common.protocol import Perm, SubscriptionGroupConfig
from ferrymq.remoting.codes import ResponseCode

MAX_BATCH = 32  # RocketMQ's broker refuses larger POP batches too
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ 5's longest invisible duration
MAX_POLL_MS = 5 * 60 * 1000
CLASSIC_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")


def check_receive(ctx: BrokerContext, group: str, topic: str, queue_id: int, max_messages: int, invisible_ms: int,
                  poll_ms: int) -> PopResult | tuple[SubscriptionGroupConfig, int]:
    """The refusal of a receive as RocketMQ answers it, or the group's config and the topic's
    read queue count to serve it with."""

    def refused(code: int, remark: str) -> PopResult:
        return PopResult(PopStatus.REFUSED, [], remark, code)

    if not 1 <= max_messages <= MAX_BATCH:
        return refused(ResponseCode.INVALID_PARAMETER, f"max messages {max_messages} out of range: 1..{MAX_BATCH}")
    if not 0 < invisible_ms <= MAX_INVISIBLE_MS:
        return refused(ResponseCode.INVALID_PARAMETER,
                       f"invisible time {invisible_ms} ms out of range: 1..{MAX_INVISIBLE_MS} ms")
    if not 0 <= poll_ms <= MAX_POLL_MS:
        return refused(ResponseCode.INVALID_PARAMETER, f"poll time {poll_ms} ms out of range: 0..{MAX_POLL_MS} ms")
    if ctx.config.is_slave:
        return refused(ResponseCode.NO_PERMISSION,
                       f"the broker[{ctx.config.broker_name}] is a slave: POP consumption is served by its master")
    if not Perm.readable(ctx.config.broker_permission):
        return refused(ResponseCode.NO_PERMISSION, f"the broker[{ctx.config.broker_name}] pop message is forbidden")
    group_config = ctx.groups.find_or_create(group)
    if group_config is None:
        return refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
    if not group_config.consume_enable:
        return refused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    topic_config = ctx.topics.get(topic)
    if topic_config is None:
        return refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not Perm.readable(topic_config.perm):
        return refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    if queue_id != -1 and not 0 <= queue_id < topic_config.read_queue_nums:
        return refused(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                                  f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}]")
    classic = classic_consumers(ctx.consumers, group, topic)
    if classic:
        return refused(ResponseCode.NO_PERMISSION,
                       f"consumer group [{group}] has classic (pull/push) consumers online for topic [{topic}] "
                       f"({', '.join(classic[:3])}): a group's queues are consumed by POP or by classic "
                       f"consumers, not both")
    return group_config, topic_config.read_queue_nums


def classic_consumers(consumers: ConsumerManager, group: str, topic: str) -> list[str]:
    """Client ids of the group's classic (pull/push) consumers online for ``topic``."""
    info = consumers.groups.get(group)
    if info is None or not info.channels or info.consume_type not in CLASSIC_CONSUME_TYPES:
        return []
    if topic not in info.subscriptions:
        return []
    return info.client_ids()
