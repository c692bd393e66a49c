"""The controller's /metrics: per broker group its epoch and which broker id is master,
read from the live state at scrape time."""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.controller.state import Group


class ControllerCollector(Collector):
    def __init__(self, groups: Callable[[], dict[str, Group]]) -> None:
        self._groups = groups

    def collect(self) -> Iterator:
        epoch = GaugeMetricFamily("ferrymq_controller_epoch", "Epoch of each broker group's current master",
                                  labels=["cluster", "broker"])
        master = GaugeMetricFamily("ferrymq_controller_master_id", "Broker id of each group's master (-1: none)",
                                   labels=["cluster", "broker"])
        for name, group in sorted(self._groups().items()):
            cur = group.current
            epoch.add_metric([group.cluster, name], cur.epoch if cur else 0)
            master.add_metric([group.cluster, name], cur.master_id if cur else -1)
        yield epoch
        yield master


def controller_registry(groups: Callable[[], dict[str, Group]]) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ControllerCollector(groups))
    return registry
