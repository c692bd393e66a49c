"""POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053): the
remoting face of broker/pop.

Header fields are RocketMQ 5's (PopMessageRequestHeader: consumerGroup, topic, queueId,
maxMsgNums, invisibleTime, pollTime, bornTime, initMode, expType, exp, order;
AckMessageRequestHeader / ChangeInvisibleTimeRequestHeader: consumerGroup, topic, queueId,
extraInfo, offset, invisibleTime). The receipt handle is ours (broker/pop/receipt.py): each
returned record carries it in its ``POP_CK`` property and its reconsume times are the delivery
attempt - 1; acks and changes carry it back in ``extraInfo``. Apache's remoting POP clients build
their extraInfo from RocketMQ's own checkpoint fields instead, which are not served here.

Answers, as RocketMQ 5's broker: messages SUCCESS (body: the records); nothing within pollTime
POLLING_TIMEOUT (210); long-polling slots full POLLING_FULL (209); maxMsgNums over 32 or an
illegal queueId (and here also an invisible or poll time out of range) INVALID_PARAMETER (29);
otherwise refused with the service's code and remark. A handle that is not one of ours
MESSAGE_ILLEGAL; an out-of-date one NO_MESSAGE (208).
"""

from __future__ import annotations

import time

from ferrymq.broker.message_filter import FilterRefused, message_filter
from ferrymq.broker.pop.outcomes import AckStatus, InitMode, PopStatus
from ferrymq.broker.pop.receivers import ReceiverAgent
from ferrymq.broker.pop.service import PopService
from ferrymq.common.consumer_protocol import build_subscription
from ferrymq.common.message import encode_record
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    AckMessageHeader,
    ChangeInvisibleTimeHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageHeader,
    PopMessageResponseHeader,
)

POP_CK = "POP_CK"  # MessageConst.PROPERTY_POP_CK


class PopProcessors:
    def __init__(self, pop: PopService, enable_property_filter: bool) -> None:
        self.pop = pop
        self.enable_property_filter = enable_property_filter

    def handlers(self) -> dict:
        return {RequestCode.POP_MESSAGE: self.pop_message, RequestCode.ACK_MESSAGE: self.ack_message,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time}

    async def pop_message(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        asked = PopMessageHeader.read(req)
        topic, invisible_ms, init = asked.topic, asked.invisible_time, asked.init_mode
        if init not in (InitMode.MIN, InitMode.MAX):
            return req.response(ResponseCode.INVALID_PARAMETER, f"initMode {init} unknown: 0 (MIN) or 1 (MAX)")
        exp_type = (asked.exp_type or "TAG").upper()
        if exp_type not in ("TAG", "SQL92"):
            return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"unknown expression type {exp_type}")
        try:
            wanted = message_filter(build_subscription(topic, asked.exp or "*", exp_type),
                                    self.enable_property_filter)
        except FilterRefused as refused:
            return req.response(refused.code, refused.remark)
        result = await self.pop.receive(group=asked.consumer_group, topic=topic, queue_id=asked.queue_id,
                                        max_messages=asked.max_msg_nums, invisible_ms=invisible_ms,
                                        poll_ms=asked.poll_time,
                                        message_filter=None if wanted.passes_all else wanted,
                                        fifo=asked.order, client_id=_client(conn),
                                        init_mode=InitMode(init),
                                        agent=ReceiverAgent(req.language, req.version, asked.exp or "*", exp_type))
        fields = PopMessageResponseHeader(pop_time=int(time.time() * 1000), invisible_time=invisible_ms, revive_qid=0,
                                          rest_num=0).to_ext_fields()
        if result.status is PopStatus.REFUSED:
            return req.response(result.refused_code or ResponseCode.SYSTEM_ERROR, result.remark)
        if result.status is PopStatus.POLLING_FULL:
            return req.response(ResponseCode.POLLING_FULL, result.remark or "polling full")
        if not result.messages:
            return req.response(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext_fields=fields)
        records = []
        for popped in result.messages:
            msg = popped.message
            msg.properties[POP_CK] = popped.receipt_handle
            records.append(bytes(encode_record(msg)))
        return req.response(ResponseCode.SUCCESS, None, body=b"".join(records), ext_fields=fields)

    async def ack_message(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        ack = AckMessageHeader.read(req)
        status = await self.pop.ack(group=ack.consumer_group, topic=ack.topic, receipt_handle=ack.extra_info)
        return _ack_response(req, status)

    async def change_invisible_time(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        change = ChangeInvisibleTimeHeader.read(req)
        invisible_ms = change.invisible_time
        try:
            status, new_handle = await self.pop.change_invisible(group=change.consumer_group, topic=change.topic,
                                                                 receipt_handle=change.extra_info,
                                                                 invisible_ms=invisible_ms)
        except ValueError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if status is not AckStatus.OK:
            return _ack_response(req, status)
        return req.response(ResponseCode.SUCCESS, None, ext_fields=ChangeInvisibleTimeResponseHeader(
            pop_time=int(time.time() * 1000), invisible_time=invisible_ms, revive_qid=0,
            extra_info=new_handle).to_ext_fields())


def _ack_response(req: RemotingCommand, status: AckStatus) -> RemotingCommand:
    if status is AckStatus.OK:
        return req.response(ResponseCode.SUCCESS, None)
    if status is AckStatus.EXPIRED:
        return req.response(ResponseCode.NO_MESSAGE, "receipt handle out of date: the message was delivered again "
                                                     "or its invisible time changed since")
    return req.response(ResponseCode.MESSAGE_ILLEGAL, "invalid receipt handle (extraInfo): not one this broker "
                                                      "issued for this consumer group and topic")


def _client(conn: Connection) -> str:
    host, port = conn.remote_address[:2]
    return f"{host}:{port}"
