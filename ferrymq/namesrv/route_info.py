"""The name server's picture of the cluster: which brokers are alive and which queues each
topic has on them. Pure state, no I/O: the request processor and the expiry task drive it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ferrymq.common.protocol import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)

log = logging.getLogger(__name__)


@dataclass
class BrokerLiveInfo:
    last_update: float
    data_version: DataVersion
    connection: object | None
    ha_server_addr: str = ""


@dataclass
class RegisterResult:
    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass
class RouteInfo:
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)

    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, topics: TopicConfigSerializeWrapper | None,
                        connection: object | None = None) -> RegisterResult:
        if self._stale_epoch(broker_name, broker_id, broker_addr, topics):
            return RegisterResult()
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        broker = self.broker_addr_table.get(broker_name)
        first = broker is None
        if broker is None:
            broker = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name, {})
        # One address per broker id: a restarted pod at a new address replaces the old one.
        for bid, addr in list(broker.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del broker.broker_addrs[bid]
        previous = broker.broker_addrs.get(broker_id)
        first = first or previous != broker_addr
        broker.broker_addrs[broker_id] = broker_addr
        if previous is not None and previous != broker_addr:  # a failover, or a pod at a new address
            log.info("broker %s id %d is now %s (was %s)", broker_name, broker_id, broker_addr, previous)

        live = self.broker_live_table.get(broker_addr)
        if topics is not None and broker_id == MASTER_ID:
            if first or live is None or not live.data_version.same(topics.data_version):
                self._replace_queue_data(broker_name, topics)
        version = topics.data_version if topics else DataVersion()
        if live is None:
            log.info("broker registered: %s %s (%s, id %d)", broker_name, broker_addr, cluster, broker_id)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(time.monotonic(), version, connection, ha_server_addr)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master = broker.broker_addrs.get(MASTER_ID)
            if master:
                result.master_addr = master
                master_live = self.broker_live_table.get(master)
                result.ha_server_addr = master_live.ha_server_addr if master_live else None
        return result

    def _stale_epoch(self, broker_name: str, broker_id: int, broker_addr: str,
                     topics: TopicConfigSerializeWrapper | None) -> bool:
        """A registration for an id that a live broker of a later master epoch holds (RocketMQ 5's
        stateVersion): a deposed master whose registration arrives after its successor's (a
        partition healed, a request stuck in a socket) must not take the route back. Refused, and
        forgotten as a live broker."""
        broker = self.broker_addr_table.get(broker_name)
        holder_addr = broker.broker_addrs.get(broker_id) if broker else None
        if holder_addr is None or holder_addr == broker_addr:
            return False
        holder = self.broker_live_table.get(holder_addr)
        epoch = topics.data_version.state_version if topics is not None else 0
        if holder is None or holder.data_version.state_version <= epoch:
            return False
        log.warning("broker %s id %d at %s registered with master epoch %d, but %s holds that id with epoch %d: "
                    "ignored", broker_name, broker_id, broker_addr, epoch, holder_addr,
                    holder.data_version.state_version)
        self.broker_live_table.pop(broker_addr, None)
        return True

    def _replace_queue_data(self, broker_name: str, topics: TopicConfigSerializeWrapper) -> None:
        present = set()
        for name, tc in topics.topic_config_table.items():
            present.add(name)
            self.topic_queue_table.setdefault(name, {})[broker_name] = QueueData(
                broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        # Topics the broker no longer has lose this broker's queue data.
        for name in list(self.topic_queue_table):
            if name not in present:
                self._remove_topic_broker(name, broker_name)

    def _remove_topic_broker(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues and queues.pop(broker_name, None) is not None and not queues:
            del self.topic_queue_table[topic]

    def is_changed(self, broker_addr: str, version: DataVersion) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or not live.data_version.same(version)

    def touch(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live:
            live.last_update = time.monotonic()

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int, reason: str = "unregistered") -> None:
        self.broker_live_table.pop(broker_addr, None)
        broker = self.broker_addr_table.get(broker_name)
        if broker is None:
            return
        if broker.broker_addrs.get(broker_id) == broker_addr:
            del broker.broker_addrs[broker_id]
        log.info("broker removed: %s %s (%s)", broker_name, broker_addr, reason)
        if not broker.broker_addrs:
            del self.broker_addr_table[broker_name]
            names = self.cluster_addr_table.get(cluster or broker.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster or broker.cluster]
            for topic in list(self.topic_queue_table):
                self._remove_topic_broker(topic, broker_name)

    def remove_by_address(self, broker_addr: str, reason: str) -> None:
        for broker in list(self.broker_addr_table.values()):
            for bid, addr in list(broker.broker_addrs.items()):
                if addr == broker_addr:
                    self.unregister_broker(broker.cluster, addr, broker.broker_name, bid, reason)
        self.broker_live_table.pop(broker_addr, None)

    def remove_by_connection(self, connection: object) -> None:
        for addr, live in list(self.broker_live_table.items()):
            if live.connection is connection:
                self.remove_by_address(addr, "connection closed")

    def expire(self, max_idle_seconds: float) -> None:
        deadline = time.monotonic() - max_idle_seconds
        for addr, live in list(self.broker_live_table.items()):
            if live.last_update < deadline:
                self.remove_by_address(addr, f"no registration for {max_idle_seconds:.0f}s")

    def topic_route(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers = [self.broker_addr_table[name] for name in sorted(queues) if name in self.broker_addr_table]
        if not brokers:
            return None
        return TopicRouteData(
            queue_datas=[queues[name] for name in sorted(queues)],
            broker_datas=[BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs)) for b in brokers],
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={k: BrokerData(v.cluster, v.broker_name, dict(v.broker_addrs)) for k, v in self.broker_addr_table.items()},
            cluster_addr_table={k: sorted(v) for k, v in self.cluster_addr_table.items()},
        )

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, q in self.topic_queue_table.items() if names & set(q))

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if not cluster:
            self.topic_queue_table.pop(topic, None)
            return
        for broker_name in self.cluster_addr_table.get(cluster, set()):
            self._remove_topic_broker(topic, broker_name)
