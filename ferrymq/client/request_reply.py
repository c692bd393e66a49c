"""Request-reply (Java's ``producer.request()`` and ``MessageUtil.createReplyMessage``): a
request is an ordinary message carrying CORRELATION_ID, REPLY_TO_CLIENT (the requester's
client id) and TTL; the responder answers with a reply message to ``<cluster>_REPLY_TOPIC``,
which the broker pushes straight to the requester (PUSH_REPLY_MESSAGE_TO_CLIENT) where it
completes the waiting request."""

from __future__ import annotations

import asyncio
import logging
import uuid

from ferrymq.client.errors import MQClientError
from ferrymq.common.message import Message, MessageExt, Prop, SysFlag, decode_properties, decompress_body
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import ReplyMessageHeader

log = logging.getLogger(__name__)

REPLY_TYPE = "reply"  # MSG_TYPE of a reply (MixAll.REPLY_MESSAGE_FLAG)


def reply_topic(cluster: str) -> str:
    return f"{cluster}_REPLY_TOPIC"


def create_reply(request: MessageExt, body: bytes) -> Message:
    """The reply to a received request message, to send with any producer."""
    cluster = request.properties.get(Prop.CLUSTER)
    requester = request.properties.get(Prop.REPLY_TO_CLIENT)
    if not cluster or not requester:
        raise MQClientError("not a request message: it names no CLUSTER or REPLY_TO_CLIENT")
    props = {Prop.MSG_TYPE: REPLY_TYPE, Prop.REPLY_TO_CLIENT: requester}
    for name in (Prop.CORRELATION_ID, Prop.TTL):
        if name in request.properties:
            props[name] = request.properties[name]
    return Message(topic=reply_topic(cluster), body=body, properties=props)


def is_reply(msg: Message) -> bool:
    return msg.properties.get(Prop.MSG_TYPE) == REPLY_TYPE


class PendingRequests:
    """Requests waiting for their reply, by correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future] = {}

    def prepare(self, msg: Message, client_id: str, timeout: float) -> asyncio.Future:
        correlation_id = str(uuid.uuid4())
        msg.properties[Prop.CORRELATION_ID] = correlation_id
        msg.properties[Prop.REPLY_TO_CLIENT] = client_id
        msg.properties[Prop.TTL] = str(int(timeout * 1000))
        future = self._waiting[correlation_id] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _: self._waiting.pop(correlation_id, None))
        return future

    async def on_push(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: complete the waiting request (a late reply is logged)."""
        reply = ReplyMessageHeader.read(request)
        msg = MessageExt(topic=reply.topic, body=request.body or b"", flag=reply.flag,
                         properties=decode_properties(reply.properties), queue_id=reply.queue_id,
                         sys_flag=reply.sys_flag, born_timestamp=reply.born_timestamp,
                         store_timestamp=reply.store_timestamp, reconsume_times=reply.reconsume_times)
        if msg.sys_flag & SysFlag.COMPRESSED:
            try:
                msg.body = decompress_body(msg)
            except ValueError as e:
                return request.response(ResponseCode.SYSTEM_ERROR, remark=f"reply body does not decompress: {e}")
        future = self._waiting.get(msg.properties.get(Prop.CORRELATION_ID, ""))
        if future is None or future.done():
            log.info("reply %s came after its request ended", msg.properties.get(Prop.CORRELATION_ID))
        else:
            future.set_result(msg)
        return request.response(ResponseCode.SUCCESS)
