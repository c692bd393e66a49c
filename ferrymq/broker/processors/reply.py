"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): a responder's reply to a
request message (Java's ``producer.request()``). The reply is pushed at once to the
requesting client, found among this broker's producers by the REPLY_TO_CLIENT client id,
as PUSH_REPLY_MESSAGE_TO_CLIENT (326); with storeReplyMessageEnable it is also stored in
its topic (``<cluster>_REPLY_TOPIC``). The responder hears SUCCESS only when the push
reached the requester."""

from __future__ import annotations

import dataclasses
import logging
import time

from ferrymq.broker.context import BrokerContext
from ferrymq.common.message import MessageExt, Prop, decode_properties, encode_properties
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import ReplyMessageHeader, SendMessageResponseHeader
from ferrymq.remoting.request_headers import SendMessageHeader

log = logging.getLogger(__name__)

PUSH_TIMEOUT = 3.0  # RocketMQ's


class ReplyProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = SendMessageHeader.from_request(req)
        ctx = self.ctx
        if ctx.topics.get(header.topic) is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{header.topic}] not exist, apply first please!")
        props = decode_properties(header.properties)
        props[Prop.CLUSTER] = ctx.config.broker_cluster_name
        now = int(time.time() * 1000)
        msg = MessageExt(topic=header.topic, body=req.body or b"", flag=header.flag, properties=props,
                         queue_id=max(header.queue_id, 0), sys_flag=header.sys_flag,
                         born_timestamp=header.born_timestamp or now, born_host=conn.remote_address[:2],
                         store_host=ctx.store_host, reconsume_times=header.reconsume_times, store_timestamp=now)
        pushed, remark = await self._push(header, msg)
        if not pushed:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=remark)
        answer = SendMessageResponseHeader(msg_id="", queue_id=msg.queue_id, queue_offset=0)
        if ctx.config.store_reply_message_enable:
            result = await ctx.store.put_message(msg)
            if not result.ok:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=f"the reply reached its requester but storing it "
                                                                      f"failed: {result.remark or result.status.name}")
            answer = dataclasses.replace(answer, msg_id=result.msg_id, queue_offset=result.queue_offset)
        return req.response(ResponseCode.SUCCESS, ext_fields=answer.to_ext_fields())

    async def _push(self, header: SendMessageHeader, msg: MessageExt) -> tuple[bool, str]:
        requester = msg.properties.get(Prop.REPLY_TO_CLIENT, "")
        channel = self.ctx.consumers.find_producer(requester) if requester else None
        if channel is None:
            return False, f"push reply message to {requester} fail, channel of {requester} not found."
        props = dict(msg.properties)
        props[Prop.PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ReplyMessageHeader(
            producer_group=header.producer_group, topic=msg.topic, default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums, queue_id=msg.queue_id,
            sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, flag=msg.flag,
            properties=encode_properties(props), reconsume_times=msg.reconsume_times, unit_mode=False,
            born_host="%s:%d" % msg.born_host, store_host="%s:%d" % self.ctx.store_host,
            store_timestamp=msg.store_timestamp).to_ext_fields(), body=msg.body)
        try:
            answer = await channel.connection.invoke(push, PUSH_TIMEOUT)
        except RemotingError as e:
            return False, f"push reply message to {requester} failed: {e}"
        if answer.code != ResponseCode.SUCCESS:
            return False, f"push reply message to {requester} failed: {answer.remark}"
        return True, ""
