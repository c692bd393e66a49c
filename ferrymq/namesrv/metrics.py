"""Prometheus metrics of a name server, read from its route table when scraped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ferrymq.namesrv.name_server import NameServer


class NamesrvCollector(Collector):
    def __init__(self, namesrv: "NameServer") -> None:
        self.namesrv = namesrv

    def collect(self) -> Iterator:
        routes = self.namesrv.routes
        brokers = GaugeMetricFamily("ferrymq_namesrv_brokers", "Live brokers registered, per cluster", labels=["cluster"])
        for cluster, names in sorted(routes.cluster_addr_table.items()):
            brokers.add_metric([cluster], len(names))
        yield brokers
        yield GaugeMetricFamily("ferrymq_namesrv_broker_addresses", "Broker addresses with a live registration",
                                value=len(routes.broker_live_table))
        yield GaugeMetricFamily("ferrymq_namesrv_topics", "Topics with route data", value=len(routes.topic_queue_table))
        yield GaugeMetricFamily("ferrymq_namesrv_connections", "Open connections", value=len(self.namesrv.server.connections))


def namesrv_registry(namesrv: "NameServer") -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NamesrvCollector(namesrv))
    return registry
