"""Consumer-group requests: subscription groups (200, 201, 207), consume stats (208), the
group's connections (203), orderly queue locks (41, 42), send-back (36), delay offsets (45),
offset resets (222) and message request modes (402)."""

from __future__ import annotations

import logging

from ferrymq.broker.client_notifier import ClientNotifier
from ferrymq.broker.context import BrokerContext
from ferrymq.broker.online_clients import OnlineClients
from ferrymq.broker.protection import ConsumeProtection
from ferrymq.broker.retry import RetryService, SendBackRequest
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.common.consumer_protocol import (
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageRequestModeSerializeWrapper,
    OffsetWrapper,
    ResetOffsetBody,
    UnlockBatchRequestBody,
    build_subscription,
)
from ferrymq.common.protocol import MessageQueue, SubscriptionGroupConfig
from ferrymq.common.validators import validate_group
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    ConsumerGroupHeader,
    ConsumerSendMsgBackHeader,
    ConsumeStatsHeader,
    DeleteGroupHeader,
    ResetOffsetHeader,
)

log = logging.getLogger(__name__)


class ConsumerAdminProcessors:
    def __init__(self, ctx: BrokerContext, retry: RetryService, schedule: ScheduleMessageService,
                 protection: ConsumeProtection, notifier: ClientNotifier, online: OnlineClients) -> None:
        self.ctx = ctx
        self.online = online
        self.retry = retry
        self.schedule = schedule
        self.protection = protection
        self.notifier = notifier

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connections,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.get_all_message_request_modes,
        }

    # ------------------------------------------------------------------ subscription groups

    async def update_group(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_json(req.body or b"")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed subscription group body: {e}")
        error = validate_group(config.group_name)
        if error:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"group[{config.group_name}] is invalid: {error}")
        groups = self.ctx.groups
        old = groups.get(config.group_name)
        if config.consume_enable and old is not None and not old.consume_enable:
            # An admin let the group consume again: judge it on its pulls from now on.
            self.protection.forget_group(config.group_name)
            log.info("subscription group %s re-enabled by %s", config.group_name, conn.remote_address[0])
        groups.update(config)
        await groups.persist()
        return req.response()

    async def delete_group(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        delete = DeleteGroupHeader.read(req)
        group = delete.group_name
        self.ctx.groups.delete(group)
        if delete.remove_offset:
            self.ctx.offsets.remove_group(group)
        await self.ctx.groups.persist()
        return req.response()

    async def get_all_groups(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response(body=self.ctx.groups.render().encode())

    # ------------------------------------------------------------------ stats and connections

    async def get_consume_stats(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        ctx = self.ctx
        query = ConsumeStatsHeader.read(req)
        group, only_topic = query.consumer_group, query.topic
        topics = [only_topic] if only_topic else sorted(ctx.offsets.topics_of_group(group))
        online = ctx.consumers.groups.get(group)
        stats = ConsumeStats()
        store = ctx.store
        for topic in topics:
            config = ctx.topics.get(topic)
            if config is None:
                continue
            # A topic the online group no longer subscribes is stale history, not lag.
            if online and online.subscriptions and topic not in online.subscriptions:
                continue
            for queue_id in range(config.read_queue_nums):
                consumer_offset = max(0, ctx.offsets.query(group, topic, queue_id))
                last = 0
                if consumer_offset > 0:
                    last = max(0, await store.store_time(topic, queue_id, consumer_offset - 1))
                mq = MessageQueue(topic, ctx.config.broker_name, queue_id)
                stats.offset_table[mq] = OffsetWrapper(store.max_offset(topic, queue_id), consumer_offset, last)
        group_config = ctx.groups.get(group)
        stats.consume_enable = group_config.consume_enable if group_config else None
        return req.response(body=stats.to_json())

    async def get_consumer_connections(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Every online consumer of the group: 4.x remoting ones, 5.x gRPC ones and POP receivers
        (FerryMQ's ``protocol`` and ``subscriptions`` per connection say which; Java readers
        ignore them). The group-level fields are the remoting members' when there are any."""
        group = ConsumerGroupHeader.read(req).consumer_group
        clients = self.online.of_group(group)
        if not clients:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online")
        info = self.ctx.consumers.groups.get(group)
        table = dict(info.subscriptions) if info else {}
        for client in clients:
            for topic, expression in client.subscriptions.items():
                table.setdefault(topic, build_subscription(topic, expression, client.filter_types.get(topic, "TAG")))
        classic = info is not None and bool(info.channels)
        body = ConsumerConnection(
            connection_set=[ClientConnection(c.client_id, c.address, c.language,
                                             int(c.version) if c.version.isdigit() else 0, protocol=c.protocol,
                                             client_version=c.version or None, subscriptions=c.subscriptions or None)
                            for c in clients],
            subscription_table=table, consume_type=info.consume_type if classic else "CONSUME_POP",
            message_model=info.message_model if classic else "CLUSTERING",
            consume_from_where=info.consume_from_where if classic else "CONSUME_FROM_LAST_OFFSET")
        return req.response(body=body.to_json())

    # ------------------------------------------------------------------ orderly locks

    async def lock_batch(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            body = LockBatchRequestBody.from_json(req.body or b"{}")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed lock body: {e}")
        locked = self.ctx.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return req.response(body=LockBatchResponseBody(sorted(locked)).to_json())

    async def unlock_batch(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            body = UnlockBatchRequestBody.from_json(req.body or b"{}")
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"malformed unlock body: {e}")
        self.ctx.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return req.response()

    # ------------------------------------------------------------------ retries and delays

    async def send_back(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        back = ConsumerSendMsgBackHeader.read(req)
        result = await self.retry.send_back(SendBackRequest(
            group=back.group, offset=back.offset, delay_level=back.delay_level,
            max_reconsume_times=back.max_times(req.version)))
        return req.response(result.code, remark=result.remark)

    async def get_all_delay_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response(body=self.schedule.render().encode())

    async def get_all_message_request_modes(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_MESSAGE_REQUEST_MODE (RocketMQ 5): the groups set to POP or PULL per topic, which
        a 5.x slave copies. FerryMQ keeps no such table (it serves neither SET_MESSAGE_REQUEST_MODE
        nor QUERY_ASSIGNMENT; a group pops or pulls as its client chooses): always the empty one."""
        return req.response(body=MessageRequestModeSerializeWrapper().to_json())

    # ------------------------------------------------------------------ offset reset

    async def reset_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: move a group's offsets on a topic to a point in time
        (-1: the end), store them, and tell the group's online members (RESET_CONSUMER_CLIENT_OFFSET)."""
        ctx = self.ctx
        reset = ResetOffsetHeader.read(req)
        topic, group, timestamp, force = reset.topic, reset.group, reset.timestamp, reset.is_force
        config = ctx.topics.get(topic)
        if config is None:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        store = ctx.store
        table: dict[MessageQueue, int] = {}
        for queue_id in range(config.write_queue_nums):
            current = ctx.offsets.query(group, topic, queue_id)
            if timestamp == -1:
                target = store.max_offset(topic, queue_id)
            else:
                target = await store.search_offset(topic, queue_id, timestamp)
            target = max(0, target)
            if not force and 0 <= current <= target:
                target = current
            table[MessageQueue(topic, ctx.config.broker_name, queue_id)] = target
            ctx.offsets.commit(group, topic, queue_id, target)
        await ctx.offsets.persist()
        body = ResetOffsetBody(table).to_json()
        await self.notifier.offsets_reset(ctx.consumers.groups.get(group), topic, timestamp, force, body)
        log.info("offsets of group %s on %s reset to %s", group, topic, {mq.queue_id: o for mq, o in table.items()})
        return req.response(body=body)
