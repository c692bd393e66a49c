"""Client registry: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46). What the broker sends to clients is in client_notifier.py."""

from __future__ import annotations

from ferrymq.broker.consumer_manager import ClientChannel, ConsumerManager
from ferrymq.broker.message_filter import FilterRefused, check_expression
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common.consumer_protocol import CheckClientRequestBody
from ferrymq.common.protocol import ConsumerListBody, HeartbeatData, Perm, retry_topic
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import ConsumerGroupHeader, UnregisterClientHeader


class ClientManageProcessors:
    def __init__(self, consumers: ConsumerManager, groups: SubscriptionGroupManager, topics: TopicConfigManager,
                 property_filter_enabled: bool = False) -> None:
        self.consumers = consumers
        self.groups = groups
        self.topics = topics
        self.property_filter_enabled = property_filter_enabled

    async def heartbeat(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            data = HeartbeatData.from_json(req.body or b"{}")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed heartbeat body: {e}")
        for consumer in data.consumer_data_set:
            group_config = self.groups.find_or_create(consumer.group_name)
            if group_config is not None and group_config.retry_queue_nums > 0:
                self.topics.ensure(retry_topic(consumer.group_name), group_config.retry_queue_nums, Perm.READ_WRITE)
            channel = ClientChannel(data.client_id, conn, req.language, req.version)
            self.consumers.register_consumer(consumer, channel)
        for producer in data.producer_data_set:
            self.consumers.register_producer(producer.group_name, ClientChannel(data.client_id, conn, req.language, req.version))
        return req.response()

    async def unregister_client(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = UnregisterClientHeader.read(req)
        self.consumers.unregister(conn, consumer_group=header.consumer_group, producer_group=header.producer_group)
        return req.response()

    async def get_consumer_list(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = ConsumerGroupHeader.read(req).consumer_group
        info = self.consumers.groups.get(group)
        if not info or not info.channels:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group}")
        return req.response(body=ConsumerListBody(info.client_ids()).to_json())

    async def check_client_config(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """A consumer with a non-TAG subscription asks before it starts: refused (and its start
        fails) when the broker cannot filter that way or the expression does not compile."""
        try:
            body = CheckClientRequestBody.from_json(req.body or b"{}")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed check-client body: {e}")
        if body.subscription_data is not None:
            try:
                check_expression(body.subscription_data, self.property_filter_enabled)
            except FilterRefused as refused:
                return req.response(refused.code, remark=refused.remark)
        return req.response()
