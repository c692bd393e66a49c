"""Replication metrics, read from the live replication state at scrape time: the broker's
role; on a master the connected slaves and each one's lag in bytes (CommitLog head minus
what the slave acknowledged) and in seconds (since the master first had a byte the slave
has not acknowledged, ha/lag.py); on a slave whether it is connected and its lag behind the
master's offset as the last transfer or heartbeat showed it; with failover, the epoch."""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.ha.lag import ReplicationLag

_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


class ReplicationCollector(Collector):
    def __init__(self, config: BrokerConfig, replication: ReplicationLag) -> None:
        self.config = config
        self.replication = replication

    def collect(self) -> Iterator:
        base, labels = ["cluster", "broker"], [self.config.broker_cluster_name, self.config.broker_name]
        status = self.replication.status()
        role = GaugeMetricFamily("ferrymq_broker_role", "1 for the broker's replication role (brokerRole)",
                                 labels=base + ["role"])
        for name in _ROLES:
            role.add_metric(labels + [name], 1 if status["role"] == name else 0)
        yield role
        if "slaves" in status:
            slaves = GaugeMetricFamily("ferrymq_broker_replication_slaves", "Slaves connected to this master",
                                       labels=base)
            slaves.add_metric(labels, len(status["slaves"]))
            yield slaves
            lag = GaugeMetricFamily("ferrymq_broker_replication_slave_lag_bytes",
                                    "CommitLog bytes a connected slave has not acknowledged yet", labels=base + ["slave"])
            for slave in status["slaves"]:
                lag.add_metric(labels + [slave["address"]], slave["lagBytes"])
            yield lag
            seconds = GaugeMetricFamily("ferrymq_broker_replication_slave_lag_seconds",
                                        "Seconds since this master first had CommitLog data a connected slave has not "
                                        "acknowledged yet (0 when the slave has everything)", labels=base + ["slave"])
            for slave in status["slaves"]:
                seconds.add_metric(labels + [slave["address"]], slave["lagSeconds"])
            yield seconds
        if "connected" in status:  # a slave (with failover a broker may also keep its idle master side)
            connected = GaugeMetricFamily("ferrymq_broker_replication_connected",
                                          "1 while this slave is connected to its master", labels=base)
            connected.add_metric(labels, 1 if status["connected"] else 0)
            yield connected
            behind = GaugeMetricFamily("ferrymq_broker_replication_lag_bytes",
                                       "Bytes of the master's CommitLog this slave has not written yet (as of the "
                                       "master's last transfer or heartbeat)", labels=base)
            behind.add_metric(labels, max(0, status["masterOffset"] - status["maxPhyOffset"]))
            yield behind
        if "epoch" in status:
            epoch = GaugeMetricFamily("ferrymq_broker_replication_epoch",
                                      "The replication epoch this broker is in (failover bumps it at each promotion)",
                                      labels=base)
            epoch.add_metric(labels, status["epoch"])
            yield epoch
