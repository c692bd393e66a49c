"""The admin processor: every request code without a dedicated processor comes here.

Topic management, broker config and runtime info, and topic stats (message queries are
in query.py). Codes it does not know are answered REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.runtime_info import runtime_info
from ferrymq.common import rocketmq_json
from ferrymq.common.config_loader import ConfigError, apply_settings, parse_properties, to_properties
from ferrymq.common.protocol import TIMER_TOPIC, DataVersion, KVTable, MessageQueue, TimerCheckpointBody, TopicConfig
from ferrymq.common.timer_metrics import TimerMetric, TimerMetrics
from ferrymq.common.validators import validate_topic
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import BrokerConfigResponseHeader, CreateTopicHeader, TopicHeader

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]


class AdminProcessor:
    def __init__(self, ctx: BrokerContext, on_config_updated: Callable[[set[str]], None],
                 replication_status: Callable[[], dict] | None = None) -> None:
        self.ctx = ctx
        self.on_config_updated = on_config_updated  # keys UPDATE_BROKER_CONFIG changed
        self.replication_status = replication_status  # role and slaves' lag, for the runtime info
        self.handlers: dict[int, Handler] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.GET_TIMER_METRICS: self.get_timer_metrics,
            RequestCode.GET_TIMER_CHECK_POINT: self.get_timer_checkpoint,
        }

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        handler = self.handlers.get(req.code)
        if handler is None:
            return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {req.code} not supported")
        return await handler(req, conn)

    # ------------------------------------------------------------------ topics

    async def update_topic(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        create = CreateTopicHeader.read(req)
        topic = create.topic
        error = validate_topic(topic)
        if error:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"topic[{topic}] is invalid: {error}")
        if topic == self.ctx.config.broker_cluster_name or self.ctx.topics.is_system_topic(topic):
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"The topic[{topic}] is conflict with system topic.")
        read, write = create.read_queue_nums, create.write_queue_nums
        if not (1 <= read <= 1024 and 1 <= write <= 1024):
            return req.response(ResponseCode.SYSTEM_ERROR, remark="queue numbers must be between 1 and 1024")
        self.ctx.topics.update(TopicConfig(
            topic_name=topic, read_queue_nums=read, write_queue_nums=write, perm=create.perm,
            topic_filter_type=create.topic_filter_type, topic_sys_flag=create.topic_sys_flag, order=create.order))
        return req.response()

    async def delete_topic(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = TopicHeader.read(req).topic
        if self.ctx.topics.is_system_topic(topic):
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"The topic[{topic}] is a system topic and cannot be deleted.")
        self.ctx.topics.delete(topic)
        return req.response()

    async def get_all_topic_config(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response(body=self.ctx.topics.wrapper().to_json())

    async def get_topic_stats(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = TopicHeader.read(req).topic
        config = self.ctx.topics.get(topic)
        if config is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
        store = self.ctx.store
        table = {}
        for queue_id in range(config.write_queue_nums):
            max_offset = store.max_offset(topic, queue_id)
            last = await store.store_time(topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            mq = MessageQueue(topic, self.ctx.config.broker_name, queue_id)
            table[rocketmq_json.ObjectKey(mq.to_dict())] = {
                "minOffset": store.min_offset(topic, queue_id), "maxOffset": max_offset,
                "lastUpdateTimestamp": max(last, 0)}
        return req.response(body=rocketmq_json.dumps({"offsetTable": table}).encode())

    async def query_topic_consume_by_who(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Groups that consume a topic: online subscribers and groups with offsets for it."""
        topic = TopicHeader.read(req).topic
        groups = set(self.ctx.offsets.groups_of_topic(topic))
        groups |= {name for name, info in self.ctx.consumers.groups.items() if topic in info.subscriptions}
        return req.response(body=rocketmq_json.dumps({"groupList": sorted(groups)}).encode())

    # ------------------------------------------------------------------ broker

    async def get_broker_config(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        props = to_properties(self.ctx.config, self.ctx.store_config)
        text = "\n".join(f"{k}={v}" for k, v in sorted(props.items())) + "\n"
        version = BrokerConfigResponseHeader(version=rocketmq_json.dumps(self.ctx.topics.data_version.to_dict()))
        return req.response(ext_fields=version.to_ext_fields(), body=text.encode())

    async def update_broker_config(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            settings = parse_properties((req.body or b"").decode("utf-8"))
            apply_settings(settings, self.ctx.config, self.ctx.store_config, live_only=True)
        except (ConfigError, UnicodeDecodeError) as e:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=str(e))
        log.info("broker config updated: %s", ", ".join(f"{k}={v}" for k, v in settings.items()))
        self.on_config_updated(set(settings))
        return req.response()

    async def get_timer_metrics(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Timers waiting per real topic (docs/timers.md#operator-views)."""
        pending = self.ctx.store.pending_timers
        if pending is None:
            return req.response(ResponseCode.SYSTEM_ERROR, remark="timer messages are not enabled, timerWheelEnable is false")
        metrics = TimerMetrics({t.topic: TimerMetric(t.count, t.updated_ms, t.earliest_due_ms) for t in pending.by_topic()})
        return req.response(body=metrics.to_json())

    async def get_timer_checkpoint(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The timer checkpoint a slave copies (docs/timers.md#slaves), in Apache 5's binary form.
        Its data version changes exactly when the fired-up-to time does (that time is its stamp)."""
        store = self.ctx.store
        if not store.timers_enabled:
            return req.response(ResponseCode.SYSTEM_ERROR, remark="The checkpoint is null: timerWheelEnable is false")
        fired_ms, synced_pos = await store.timer_checkpoint()
        indexed = store.max_offset(TIMER_TOPIC, 0)
        body = TimerCheckpointBody(fired_ms, synced_pos, indexed, indexed, DataVersion(timestamp=fired_ms))
        return req.response(body=body.encode())

    async def get_runtime_info(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        replication = self.replication_status() if self.replication_status is not None else None
        return req.response(body=KVTable(await runtime_info(self.ctx, replication)).to_json())
