"""Prometheus metrics of RocketMQ 5 timers (docs/timers.md#operator-views): timers scheduled and
fired (counters), how late each fired (histogram), and how many wait per real topic (gauge)."""

from __future__ import annotations

from typing import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.timer_service import TimerService
from ferrymq.store.timer_pending import PendingTimers

# A timer fires once its second is over: normally 0-1 s late; more means the broker falls behind.
LATE_BUCKETS = (0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10, 30, 60, 300, 3600)


class TimerCollector(Collector):
    def __init__(self, config: BrokerConfig, service: TimerService, pending: PendingTimers) -> None:
        self.config = config
        self.service = service
        self.pending = pending

    def collect(self) -> Iterator:
        labels = [self.config.broker_cluster_name, self.config.broker_name]
        base = ["cluster", "broker"]
        for name, help_, value in (
            ("timers_scheduled", "Timer messages indexed to wait for their delivery time", self.pending.scheduled),
            ("timers_fired", "Timer messages stored in their topic once due", self.service.fired),
        ):
            family = CounterMetricFamily(f"ferrymq_broker_{name}", help_, labels=base)
            family.add_metric(labels, value)
            yield family
        waiting = GaugeMetricFamily("ferrymq_broker_timers_pending", "Timer messages waiting, per real topic",
                                    labels=base + ["topic"])
        for t in self.pending.by_topic():
            waiting.add_metric(labels + [t.topic], t.count)
        yield waiting


def register_timer_metrics(registry: CollectorRegistry, config: BrokerConfig, service: TimerService,
                           pending: PendingTimers | None) -> None:
    """Nothing without a timing store (timerWheelEnable=false)."""
    if pending is None:
        return
    registry.register(TimerCollector(config, service, pending))
    late = Histogram("ferrymq_broker_timer_late_seconds", "How long after its delivery time a timer message was stored "
                     "in its topic", labelnames=["cluster", "broker"], buckets=LATE_BUCKETS, registry=registry)
    service.on_late = late.labels(config.broker_cluster_name, config.broker_name).observe
