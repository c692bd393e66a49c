"""PULL_MESSAGE for both consumers: send the request, and turn the broker's answer into a
PullResult whose messages are decoded, checked against the subscription's tags (the broker
filters by tag hash only, and hashes collide), inflated, and stamped with the queue's
min/max offsets (RocketMQ's PullAPIWrapper.processPullResult)."""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass, field

from ferrymq.client.errors import MQBrokerError
from ferrymq.client.instance import ClientInstance
from ferrymq.common.message import MessageExt, Prop, decode_records, inflate_in_place
from ferrymq.common.protocol import MASTER_ID, MessageQueue, SubscriptionData
from ferrymq.remoting.codes import RequestCode, ResponseCode, SerializeType
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import PullMessageResponseHeader
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag

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
    body: bytes = b""  # the records as the broker sent them, for a raw pull (messages stay empty)


class PullService:
    """Pulls go to the broker of the group that the last answer for that queue suggested
    (suggestWhichBrokerId: a master sends a slow reader to a slave, a slave with reads off
    sends it back to the master), or to any broker of the group when that one is not in the
    route (the master is down: the slave serves). A pull to a slave never commits an offset."""

    def __init__(self, instance: ClientInstance, serialize_type: SerializeType = SerializeType.JSON) -> None:
        self.instance = instance
        self.serialize_type = serialize_type
        self._suggested: dict[MessageQueue, int] = {}  # broker id to pull each queue from next

    async def pull(self, mq: MessageQueue, header: PullMessageHeader, sub: SubscriptionData,
                   timeout: float, *, raw: bool = False) -> PullResult:
        """One pull. An answer that is no pull status (NO_PERMISSION, FLOW_CONTROL, a missing
        subscription...) raises MQBrokerError with its code. ``raw``: hand back the records'
        bytes undecoded (a columnar reader decodes them itself; no client-side tag check)."""
        addr, slave = await self.instance.find_subscribe_addr(mq.broker_name, self._suggested.get(mq, MASTER_ID),
                                                              mq.topic)
        if slave and header.sys_flag & PullSysFlag.COMMIT_OFFSET:
            header = dataclasses.replace(header, sys_flag=header.sys_flag & ~PullSysFlag.COMMIT_OFFSET)
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields(), serialize_type=self.serialize_type)
        response = await self.instance.invoke_broker(addr, request, timeout)
        answer = PullMessageResponseHeader.read(response)
        suggested = answer.suggest_which_broker_id
        self._suggested[mq] = MASTER_ID if suggested is None else suggested
        status = _STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark)
        next_begin = answer.next_begin_offset
        result = PullResult(status, header.queue_offset if next_begin is None else next_begin, answer.min_offset,
                            answer.max_offset, remark=response.remark)
        if status is PullStatus.FOUND and response.body and raw:
            result.body = response.body
        elif status is PullStatus.FOUND and response.body:
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
