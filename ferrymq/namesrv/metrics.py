"""Prometheus metrics of a name server, read from its route table when scraped."""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.namesrv.route_info import RouteInfo


class NamesrvCollector(Collector):
    def __init__(self, routes: RouteInfo, connections: Callable[[], int]) -> None:
        self.routes = routes
        self.connections = connections  # how many connections are open

    def collect(self) -> Iterator:
        routes = self.routes
        brokers = GaugeMetricFamily("ferrymq_namesrv_brokers", "Live brokers registered, per cluster", labels=["cluster"])
        for cluster, names in sorted(routes.cluster_addr_table.items()):
            brokers.add_metric([cluster], len(names))
        yield brokers
        yield GaugeMetricFamily("ferrymq_namesrv_broker_addresses", "Broker addresses with a live registration",
                                value=len(routes.broker_live_table))
        yield GaugeMetricFamily("ferrymq_namesrv_topics", "Topics with route data", value=len(routes.topic_queue_table))
        yield GaugeMetricFamily("ferrymq_namesrv_connections", "Open connections", value=self.connections())


def namesrv_registry(routes: RouteInfo, connections: Callable[[], int]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NamesrvCollector(routes, connections))
    return registry
