"""Failed messages back to the broker for later redelivery (RocketMQ's sendMessageBack).

CONSUMER_SEND_MSG_BACK asks the broker to copy the message into ``%RETRY%<group>`` with a
delay level (and into the DLQ after maxReconsumeTimes). If the broker cannot take it back,
the consumer sends the copy to the retry topic itself, as the Java client does; orderly
consumers that exhaust their local retries use that path directly.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.common.message import MessageExt, Prop, encode_properties
from ferrymq.common.protocol import CLIENT_INNER_PRODUCER_GROUP, DEFAULT_TOPIC, retry_topic
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import ConsumerSendMsgBackHeader
from ferrymq.remoting.request_headers import SendMessageHeader

log = logging.getLogger(__name__)

# Properties a consumer adds for its listener; never stored again with a retry copy.
CLIENT_ONLY_PROPS = (Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.CONSUME_START_TIME, Prop.TRAN_MSG)


class SendBack:
    def __init__(self, instance: ClientInstance, group: str, *, max_reconsume_times: int, timeout: float,
                 broker_of: Callable[[MessageExt], str]) -> None:
        """``broker_of``: the broker a message was pulled from, when the caller does not know it."""
        self.instance = instance
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.timeout = timeout
        self.broker_of = broker_of

    async def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str) -> bool:
        """CONSUMER_SEND_MSG_BACK; if the broker cannot take it, re-send to the retry topic directly."""
        try:
            addr = await self.instance.find_broker_addr(broker_name, msg.topic)
            response = await self.instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK, ConsumerSendMsgBackHeader(
                    offset=msg.commit_log_offset, group=self.group, delay_level=delay_level,
                    origin_msg_id=msg.client_msg_id, origin_topic=msg.topic, unit_mode=False,
                    max_reconsume_times=str(self.max_reconsume_times), broker_name=broker_name).to_ext_fields()),
                self.timeout)
            if response.code == ResponseCode.SUCCESS:
                return True
            raise MQBrokerError(response.code, response.remark)
        except MQClientError as e:
            log.warning("send-back of %s failed (%s); re-sending it to %s", msg.client_msg_id, e, retry_topic(self.group))
        return await self.send_to_retry_topic(msg, reconsume_times=msg.reconsume_times + 1,
                                              delay_level=3 + msg.reconsume_times, broker_name=broker_name)

    async def send_to_retry_topic(self, msg: MessageExt, *, reconsume_times: int, delay_level: int,
                                  broker_name: str | None = None) -> bool:
        """A copy to ``%RETRY%<group>`` (a broker dead-letters it once reconsume_times reaches the max)."""
        props = {k: v for k, v in msg.properties.items() if k not in CLIENT_ONLY_PROPS}
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.client_msg_id)
        props[Prop.RETRY_TOPIC] = msg.topic
        props.pop(Prop.RECONSUME_TIME, None)
        props.pop(Prop.MAX_RECONSUME_TIMES, None)
        props[Prop.DELAY] = str(delay_level)
        broker_name = broker_name or self.broker_of(msg)
        topic = retry_topic(self.group)
        try:
            addr = await self.instance.find_broker_addr(broker_name, msg.topic)
            header = SendMessageHeader(
                CLIENT_INNER_PRODUCER_GROUP, topic, default_topic=DEFAULT_TOPIC, born_timestamp=int(time.time() * 1000),
                flag=msg.flag, properties=encode_properties(props), reconsume_times=reconsume_times,
                max_reconsume_times=self.max_reconsume_times, broker_name=broker_name)
            response = await self.instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, header.to_fields(), msg.body), self.timeout)
        except MQClientError as e:
            log.warning("re-sending %s to %s failed: %s", msg.client_msg_id, topic, e)
            return False
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT):
            log.warning("re-sending %s to %s refused: code %d %s", msg.client_msg_id, topic, response.code, response.remark)
            return False
        return True
