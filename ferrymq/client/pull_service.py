"""PULL_MESSAGE for both consumers: send the request, and turn the broker's answer into a
PullResult whose messages are decoded, checked against the subscription's tags (the broker
filters by tag hash only, and hashes collide), inflated, and stamped with the queue's
min/max offsets (RocketMQ's PullAPIWrapper.processPullResult)."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from ferrymq.client.errors import MQBrokerError
from ferrymq.client.instance import ClientInstance
from ferrymq.common.message import MessageExt, Prop, decode_records, inflate_in_place
from ferrymq.common.protocol import MessageQueue, SubscriptionData
from ferrymq.remoting.codes import RequestCode, ResponseCode, SerializeType
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.request_headers import PullMessageHeader

log = logging.getLogger(__name__)


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    remark: str | None = None


class PullService:
    def __init__(self, instance: ClientInstance, serialize_type: SerializeType = SerializeType.JSON) -> None:
        self.instance = instance
        self.serialize_type = serialize_type

    async def pull(self, mq: MessageQueue, header: PullMessageHeader, sub: SubscriptionData,
                   timeout: float) -> PullResult:
        """One pull. An answer that is no pull status (NO_PERMISSION, FLOW_CONTROL, a missing
        subscription...) raises MQBrokerError with its code."""
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields(), serialize_type=self.serialize_type)
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic)
        response = await self.instance.invoke_broker(addr, request, timeout)
        status = _STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark)
        result = PullResult(status, response.get_long("nextBeginOffset", header.queue_offset),
                            response.get_long("minOffset", 0), response.get_long("maxOffset", 0), remark=response.remark)
        if status is PullStatus.FOUND and response.body:
            result.messages = accept(decode_records(response.body), sub, result.min_offset, result.max_offset)
        return result


def accept(messages: list[MessageExt], sub: SubscriptionData, min_offset: int, max_offset: int) -> list[MessageExt]:
    """The messages the subscription really wants, inflated and stamped with MIN/MAX_OFFSET."""
    tags = set(sub.tags_set) if sub.tags_set else None
    kept = []
    for m in messages:
        if tags is not None and m.tags not in tags:
            continue
        try:
            inflate_in_place(m)
        except (ValueError, OSError) as e:
            log.error("message %s at %s#%d offset %d: %s; given to the listener as stored", m.client_msg_id,
                      m.topic, m.queue_id, m.queue_offset, e)
        m.properties[Prop.MIN_OFFSET] = str(min_offset)
        m.properties[Prop.MAX_OFFSET] = str(max_offset)
        kept.append(m)
    return kept
