"""The admin client: the one place FerryMQ's CLI, operator and tests manage topics and
read cluster state, over the same wire calls RocketMQ's mqadmin uses."""

from __future__ import annotations

from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.common import rocketmq_json
from ferrymq.common.config_loader import parse_properties
from ferrymq.common.message import validate_topic
from ferrymq.common.protocol import (
    DEFAULT_TOPIC,
    ClusterInfo,
    KVTable,
    MessageQueue,
    Perm,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand


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
        fields = {"topic": topic, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": read_queues,
                  "writeQueueNums": write_queues, "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                  "order": order}
        for addr in addrs:
            _ok(await self.instance.invoke_broker(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)))
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        for addr in (await self.master_addrs(cluster)).values():
            _ok(await self.instance.invoke_broker(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})))
        for ns in self.config.namesrv_addresses():
            _ok(await self.instance.remoting.invoke(ns, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster}), self.config.api_timeout))

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
            response = _ok(await self.instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})))
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
