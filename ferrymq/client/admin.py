"""The admin client: the one place FerryMQ's CLI, operator and tests manage topics and
read cluster state, over the same wire calls RocketMQ's mqadmin uses."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.common import rocketmq_json
from ferrymq.common.config_loader import parse_properties
from ferrymq.common.consumer_protocol import ConsumerConnection, ConsumeStats, ResetOffsetBody
from ferrymq.common.message import MessageExt, Prop, decode_records, decompress_body
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import (
    DEFAULT_TOPIC,
    ClusterInfo,
    KVTable,
    MessageQueue,
    Perm,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from ferrymq.common.timer_metrics import TimerMetrics
from ferrymq.common.trace_data import (
    DEFAULT_TRACE_TOPIC,
    RECORDED_BY_PROPERTY,
    TRACE_TYPE_ORDER,
    TraceEvent,
    complete_consume_events,
    decode_trace_data,
)
from ferrymq.common.validators import validate_group, validate_topic
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    ConsumerGroupHeader,
    ConsumeStatsHeader,
    CreateTopicHeader,
    DeleteGroupHeader,
    DeleteTopicFromNamesrvHeader,
    QueryMessageHeader,
    ResetOffsetHeader,
    TopicHeader,
    ViewMessageHeader,
)


@dataclass
class MessageTrace:
    """What :meth:`AdminClient.message_trace` found: the events, oldest first, and the trace
    messages that could not be decoded (offset msgId, why)."""

    events: list[TraceEvent]
    undecodable: list[tuple[str, str]] = field(default_factory=list)


def _ok(response: RemotingCommand) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise MQBrokerError(response.code, response.remark)
    return response


class AdminClient:
    def __init__(self, *, namesrv_addr: str | None = None, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        if namesrv_addr:
            self.config.namesrv_addr = namesrv_addr
        self.instance = ClientInstance(self.config)

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> "AdminClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ cluster

    async def cluster_info(self) -> ClusterInfo:
        response = _ok(await self.instance.invoke_namesrv(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)))
        return ClusterInfo.from_json(response.body or b"{}")

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, for one cluster or all of them."""
        info = await self.cluster_info()
        names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
        if cluster and not names:
            raise MQClientError(f"cluster {cluster} has no brokers (known: {', '.join(info.cluster_addr_table) or 'none'})")
        addrs = {}
        for name in names:
            broker = info.broker_addr_table.get(name)
            if broker and broker.master_addr():
                addrs[name] = broker.master_addr()
        return addrs

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        response = _ok(await self.instance.invoke_broker(broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)))
        return KVTable.from_json(response.body or b"{}").table

    async def timer_metrics(self, broker_addr: str) -> TimerMetrics:
        """Timers waiting on one broker, per real topic (GET_TIMER_METRICS)."""
        response = _ok(await self.instance.invoke_broker(broker_addr, RemotingCommand.request(RequestCode.GET_TIMER_METRICS)))
        return TimerMetrics.from_json(response.body or b"{}")

    # ------------------------------------------------------------------ topics

    async def create_topic(self, topic: str, *, read_queues: int = 8, write_queues: int = 8, perm: int = Perm.READ_WRITE,
                           order: bool = False, cluster: str | None = None, broker_addr: str | None = None) -> list[str]:
        """Create or update ``topic`` on one broker or on every master of a cluster (all when
        none is named). Returns the broker addresses that now have it."""
        error = validate_topic(topic)
        if error:
            raise MQClientError(f"invalid topic {topic!r}: {error}")
        addrs = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        if not addrs:
            raise MQClientError("no broker is registered with the name server")
        header = CreateTopicHeader(topic=topic, default_topic=DEFAULT_TOPIC, read_queue_nums=read_queues,
                                   write_queue_nums=write_queues, perm=perm, topic_filter_type="SINGLE_TAG",
                                   topic_sys_flag=0, order=order)
        for addr in addrs:
            _ok(await self.instance.invoke_broker(addr, header.request(RequestCode.UPDATE_AND_CREATE_TOPIC)))
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        for addr in (await self.master_addrs(cluster)).values():
            _ok(await self.instance.invoke_broker(addr, TopicHeader(topic=topic).request(
                RequestCode.DELETE_TOPIC_IN_BROKER)))
        in_namesrv = DeleteTopicFromNamesrvHeader(topic=topic, cluster_name=cluster)
        for ns in self.config.namesrv_addresses():
            _ok(await self.instance.remoting.invoke(ns, in_namesrv.request(RequestCode.DELETE_TOPIC_IN_NAMESRV),
                                                    self.config.api_timeout))

    async def topic_list(self) -> list[str]:
        response = _ok(await self.instance.invoke_namesrv(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)))
        return sorted(TopicList.from_json(response.body or b"{}").topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise MQClientError(f"topic {topic} does not exist")
        return route

    async def topic_stats(self, topic: str) -> list[dict]:
        """Per queue of every broker with the topic: brokerName, queueId, minOffset, maxOffset,
        lastUpdateTimestamp (GET_TOPIC_STATS_INFO, as mqadmin topicStatus)."""
        route = await self.topic_route(topic)
        rows = []
        for broker in route.broker_datas:
            addr = broker.master_addr()
            if not addr:
                continue
            response = _ok(await self.instance.invoke_broker(addr, TopicHeader(topic=topic).request(
                RequestCode.GET_TOPIC_STATS_INFO)))
            table = rocketmq_json.loads(response.body or b"{}").get("offsetTable", {})
            for key, stats in table.items():
                mq = MessageQueue.from_dict(dict(key)) if isinstance(key, rocketmq_json.ObjectKey) else MessageQueue.from_json(key)
                rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, **stats})
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    # ------------------------------------------------------------------ brokers

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        response = _ok(await self.instance.invoke_broker(broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)))
        return parse_properties((response.body or b"").decode("utf-8"))

    async def update_broker_config(self, broker_addr: str, settings: dict[str, str]) -> None:
        body = "\n".join(f"{k}={v}" for k, v in settings.items()).encode("utf-8")
        _ok(await self.instance.invoke_broker(broker_addr, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)))

    async def topic_configs(self, broker_addr: str) -> dict[str, TopicConfig]:
        response = _ok(await self.instance.invoke_broker(broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)))
        return TopicConfigSerializeWrapper.from_json(response.body or b"{}").topic_config_table

    # ------------------------------------------------------------------ messages

    async def query_messages(self, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0,
                             end_ms: int | None = None, unique_key: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (a KEYS value, or with ``unique_key`` a
        client message id / UNIQ_KEY), from every broker serving the topic (QUERY_MESSAGE,
        as mqadmin queryMsgByKey). Brokers answer hash matches; the key is checked here."""
        route = await self.topic_route(topic)
        header = QueryMessageHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
                                    end_timestamp=end_ms if end_ms is not None else 2**63 - 1,
                                    unique_key_query="true" if unique_key else None)
        found: dict[tuple[str, int], MessageExt] = {}
        for broker in route.broker_datas:
            addr = broker.master_addr()
            if not addr:
                continue
            response = await self.instance.invoke_broker(addr, header.request(RequestCode.QUERY_MESSAGE))
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            for m in decode_records(_ok(response).body or b""):
                matches = m.properties.get(Prop.UNIQ_KEY) == key if unique_key else key in m.keys
                if matches and m.topic == topic:
                    found[(f"{m.store_host[0]}:{m.store_host[1]}", m.commit_log_offset)] = m
        return sorted(found.values(), key=lambda m: (m.store_timestamp, m.commit_log_offset))

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offset msgId names (VIEW_MESSAGE_BY_ID at the broker address it encodes)."""
        try:
            host, port, offset = decode_offset_msg_id(offset_msg_id)
        except ValueError as e:
            raise MQClientError(str(e)) from None
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        response = _ok(await self.instance.invoke_broker(addr, ViewMessageHeader(offset=offset).request(
            RequestCode.VIEW_MESSAGE_BY_ID)))
        messages = decode_records(response.body or b"")
        if not messages:
            raise MQClientError(f"broker {addr} returned no message for offset {offset}")
        return messages[0]

    async def find_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """One message by id: an offset msgId that names a registered broker is read there
        (VIEW_MESSAGE_BY_ID); anything else is taken for a client message id (UNIQ_KEY) and
        looked up in ``topic``'s index, which it then needs."""
        try:
            host, port, _ = decode_offset_msg_id(msg_id)
        except ValueError:
            host = ""
        if host:
            known = {addr for broker in (await self.cluster_info()).broker_addr_table.values()
                     for addr in broker.broker_addrs.values()}
            if f"{host}:{port}" in known or f"[{host}]:{port}" in known:
                return await self.view_message(msg_id)
        if not topic:
            raise MQClientError(f"{msg_id} is no offset msgId of a registered broker; name the topic to look it up "
                                "as a client message id")
        found = await self.query_messages(topic, msg_id, unique_key=True)
        if not found:
            raise MQClientError(f"no message with id {msg_id} in topic {topic}")
        return found[0]

    async def message_trace(self, msg_id: str, trace_topic: str = DEFAULT_TRACE_TOPIC, *, max_num: int = 64,
                            begin_ms: int = 0, end_ms: int | None = None) -> MessageTrace:
        """The trace records of the message whose client id is ``msg_id``: the trace topic's
        messages indexed under that key (as mqadmin queryMsgTraceById), decoded, the contexts of
        other messages left out, each with the trace message's born host as its client host and
        its recorder ("broker" for the records a broker wrote for gRPC traffic)."""
        events: list[TraceEvent] = []
        undecodable: list[tuple[str, str]] = []
        for m in await self.query_messages(trace_topic, msg_id, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms):
            try:
                decoded = decode_trace_data(decompress_body(m))
            except ValueError as e:  # TraceDataError, a bad compressed body, bad UTF-8
                undecodable.append((m.msg_id, str(e)))
                continue
            host = f"{m.born_host[0]}:{m.born_host[1]}"
            recorded_by = m.properties.get(RECORDED_BY_PROPERTY) or None
            events += [replace(e, client_host=e.client_host or host, recorded_by=recorded_by)
                       for e in decoded if e.msg_id == msg_id]
        events = complete_consume_events(events)
        events.sort(key=lambda e: (e.timestamp or 0, TRACE_TYPE_ORDER.index(e.type)))
        return MessageTrace(events, undecodable)

    # ------------------------------------------------------------------ consumer groups

    async def _group_targets(self, cluster: str | None, broker_addr: str | None) -> dict[str, str]:
        """brokerName -> address: one broker, or every master of a cluster (all when none is named)."""
        if broker_addr:
            return {broker_addr: broker_addr}
        addrs = await self.master_addrs(cluster)
        if not addrs:
            raise MQClientError("no broker is registered with the name server")
        return addrs

    async def group_configs(self, broker_addr: str) -> dict[str, SubscriptionGroupConfig]:
        """Every subscription group a broker knows (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        response = _ok(await self.instance.invoke_broker(
            broker_addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
        table = rocketmq_json.loads(response.body or b"{}").get("subscriptionGroupTable") or {}
        return {name: SubscriptionGroupConfig.from_dict(raw) for name, raw in table.items()}

    async def update_group(self, config: SubscriptionGroupConfig, *, cluster: str | None = None,
                           broker_addr: str | None = None) -> list[str]:
        """Create or replace a subscription group on one broker or every master (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        error = validate_group(config.group_name)
        if error:
            raise MQClientError(f"invalid group {config.group_name!r}: {error}")
        addrs = list((await self._group_targets(cluster, broker_addr)).values())
        for addr in addrs:
            _ok(await self.instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.to_json())))
        return addrs

    async def create_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           **settings) -> list[str]:
        """``settings``: SubscriptionGroupConfig fields (consume_enable, retry_max_times, ...)."""
        return await self.update_group(SubscriptionGroupConfig(group_name=group, **settings), cluster=cluster,
                                       broker_addr=broker_addr)

    async def list_groups(self, *, cluster: str | None = None) -> dict[str, dict[str, SubscriptionGroupConfig]]:
        """group -> brokerName -> its config there."""
        out: dict[str, dict[str, SubscriptionGroupConfig]] = {}
        for name, addr in (await self._group_targets(cluster, None)).items():
            for group, config in (await self.group_configs(addr)).items():
                out.setdefault(group, {})[name] = config
        return dict(sorted(out.items()))

    async def delete_group(self, group: str, *, cluster: str | None = None, remove_offsets: bool = False) -> None:
        for addr in (await self._group_targets(cluster, None)).values():
            header = DeleteGroupHeader(group_name=group, remove_offset=remove_offsets)
            _ok(await self.instance.invoke_broker(addr, header.request(RequestCode.DELETE_SUBSCRIPTIONGROUP)))

    async def set_group_consume_enable(self, group: str, enable: bool, *, cluster: str | None = None) -> list[str]:
        """Turn a group's consumption on or off on every master (how a group disabled by broker
        protection is re-enabled); other settings of the group are kept."""
        changed = []
        for addr in (await self._group_targets(cluster, None)).values():
            config = (await self.group_configs(addr)).get(group) or SubscriptionGroupConfig(group_name=group)
            config.consume_enable = enable
            _ok(await self.instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.to_json())))
            changed.append(addr)
        return changed

    async def enable_group(self, group: str, *, cluster: str | None = None) -> list[str]:
        return await self.set_group_consume_enable(group, True, cluster=cluster)

    async def disable_group(self, group: str, *, cluster: str | None = None) -> list[str]:
        return await self.set_group_consume_enable(group, False, cluster=cluster)

    async def consume_stats(self, group: str, *, topic: str | None = None, cluster: str | None = None) -> ConsumeStats:
        """The group's progress on every master, merged (GET_CONSUME_STATS): per queue the broker's
        max offset, the group's committed offset (lag = the difference) and whether it may consume."""
        merged = ConsumeStats()
        enabled: list[bool] = []
        header = ConsumeStatsHeader(consumer_group=group, topic=topic)
        for addr in (await self._group_targets(cluster, None)).values():
            response = await self.instance.invoke_broker(addr, header.request(RequestCode.GET_CONSUME_STATS))
            stats = ConsumeStats.from_json(_ok(response).body or b"{}")
            merged.offset_table.update(stats.offset_table)
            merged.consume_tps += stats.consume_tps
            if stats.consume_enable is not None:
                enabled.append(stats.consume_enable)
        merged.offset_table = dict(sorted(merged.offset_table.items()))
        merged.consume_enable = all(enabled) if enabled else None
        return merged

    async def consumer_connections(self, group: str, *, cluster: str | None = None) -> ConsumerConnection | None:
        """Who is online in the group (GET_CONSUMER_CONNECTION_LIST), None when nobody is."""
        merged: ConsumerConnection | None = None
        for addr in (await self._group_targets(cluster, None)).values():
            response = await self.instance.invoke_broker(addr, ConsumerGroupHeader(consumer_group=group).request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST))
            if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            found = ConsumerConnection.from_json(_ok(response).body or b"{}")
            if merged is None:
                merged = found
            else:
                known = {c.client_id for c in merged.connection_set}
                merged.connection_set += [c for c in found.connection_set if c.client_id not in known]
                merged.subscription_table.update(found.subscription_table)
        return merged

    async def reset_offset(self, group: str, topic: str, *, timestamp: int | None = None, force: bool = True) -> dict[MessageQueue, int]:
        """Move the group's offsets on ``topic`` to the message stored nearest ``timestamp`` (ms;
        0 = the beginning; None = the end) on every broker of the topic; with ``force`` off an
        offset only moves backwards. Online members are told and restart from there
        (INVOKE_BROKER_TO_RESET_OFFSET)."""
        route = await self.topic_route(topic)
        out: dict[MessageQueue, int] = {}
        for broker in route.broker_datas:
            addr = broker.master_addr()
            if not addr:
                continue
            header = ResetOffsetHeader(topic=topic, group=group, timestamp=-1 if timestamp is None else timestamp,
                                       is_force=force)
            response = _ok(await self.instance.invoke_broker(addr, header.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET)))
            out.update(ResetOffsetBody.from_json(response.body or b"{}").offset_table)
        return dict(sorted(out.items()))
