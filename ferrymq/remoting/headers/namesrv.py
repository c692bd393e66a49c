"""Name server headers (RocketMQ's namesrv ``protocol.header`` classes): broker registration,
routes, topics, KV config (docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire


@header
class RegisterBrokerHeader(Header):
    """REGISTER_BROKER (RegisterBrokerRequestHeader)."""

    body_crc32: int = wire("bodyCrc32", INT, 0)
    compressed: bool = wire("compressed", BOOL, False)
    cluster_name: str = wire("clusterName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", LONG, required=True)
    ha_server_addr: str = wire("haServerAddr", default="")


@header
class RegisterBrokerResponseHeader(Header):
    """REGISTER_BROKER's answer: the broker group's master, for a slave to follow."""

    master_addr: str | None = wire("masterAddr")
    ha_server_addr: str | None = wire("haServerAddr")


@header
class UnregisterBrokerHeader(Header):
    """UNREGISTER_BROKER."""

    cluster_name: str = wire("clusterName", default="")
    broker_addr: str = wire("brokerAddr", required=True)
    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", LONG, 0)


@header
class QueryDataVersionHeader(Header):
    """QUERY_DATA_VERSION."""

    broker_addr: str = wire("brokerAddr", required=True)


@header
class QueryDataVersionResponseHeader(Header):
    changed: bool = wire("changed", BOOL, False)


@header
class GetRouteInfoHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC."""

    topic: str = wire("topic", required=True, topic=True)
    accept_standard_json_only: bool | None = wire("acceptStandardJsonOnly", BOOL)


@header
class TopicsByClusterHeader(Header):
    """GET_TOPICS_BY_CLUSTER."""

    cluster: str = wire("cluster", required=True)


@header
class DeleteTopicFromNamesrvHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV."""

    topic: str = wire("topic", required=True, topic=True)
    cluster_name: str | None = wire("clusterName")


@header
class PutKVConfigHeader(Header):
    """PUT_KV_CONFIG."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)
    value: str = wire("value", required=True)


@header
class KVConfigHeader(Header):
    """GET_KV_CONFIG, DELETE_KV_CONFIG."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)


@header
class KVConfigResponseHeader(Header):
    """GET_KV_CONFIG's answer."""

    value: str | None = wire("value")


@header
class KVListHeader(Header):
    """GET_KVLIST_BY_NAMESPACE."""

    namespace: str = wire("namespace", required=True)
