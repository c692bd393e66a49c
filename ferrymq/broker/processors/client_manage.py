"""Client registry: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46), and the NOTIFY_CONSUMER_IDS_CHANGED (40) the broker sends out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ferrymq.broker.consumer_manager import ClientChannel, ConsumerGroupInfo
from ferrymq.common.protocol import ConsumerListBody, HeartbeatData, Perm, retry_topic
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.errors import RemotingError

if TYPE_CHECKING:
    from ferrymq.broker.broker import Broker

log = logging.getLogger(__name__)


class ClientManageProcessors:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    async def heartbeat(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker = self.broker
        try:
            data = HeartbeatData.from_json(req.body or b"{}")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed heartbeat body: {e}")
        for consumer in data.consumer_data_set:
            group_config = broker.groups.find_or_create(consumer.group_name)
            if group_config is not None and group_config.retry_queue_nums > 0:
                broker.topics.ensure(retry_topic(consumer.group_name), group_config.retry_queue_nums, Perm.READ_WRITE)
            channel = ClientChannel(data.client_id, conn, req.language, req.version)
            broker.consumers.register_consumer(consumer, channel)
        for producer in data.producer_data_set:
            broker.consumers.register_producer(producer.group_name, ClientChannel(data.client_id, conn, req.language, req.version))
        return req.response()

    async def unregister_client(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.broker.consumers.unregister(conn, consumer_group=req.get_str("consumerGroup"),
                                         producer_group=req.get_str("producerGroup"))
        return req.response()

    async def get_consumer_list(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = req.get_str("consumerGroup", required=True)
        info = self.broker.consumers.groups.get(group)
        if not info or not info.channels:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group}")
        return req.response(body=ConsumerListBody(info.client_ids()).to_json())

    async def check_client_config(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response()

    def notify_group_changed(self, info: ConsumerGroupInfo) -> None:
        """Tell every member of the group to rebalance now (oneway, best effort)."""
        if not self.broker.config.notify_consumer_ids_changed_enable:
            return
        group_config = self.broker.groups.get(info.group_name)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return
        for channel in list(info.channels.values()):
            self.broker.spawn(self._notify(channel.connection, info.group_name))

    @staticmethod
    async def _notify(conn: Connection, group: str) -> None:
        try:
            await conn.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))
        except RemotingError as e:
            log.debug("notify %s of group %s change failed: %s", conn.remote_address, group, e)
