"""POP consumption on /metrics: receives, deliveries, acks, redeliveries, dead letters (counters)
and messages in flight per group and topic (gauges), read from the service when scraped."""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.pop.service import PopService


class PopCollector(Collector):
    def __init__(self, config: BrokerConfig, pop: PopService) -> None:
        self.config = config
        self.pop = pop

    def collect(self) -> Iterator:
        labels = [self.config.broker_cluster_name, self.config.broker_name]
        base = ["cluster", "broker"]
        c = self.pop.counters
        for name, help_, value in (
            ("pop_receives", "POP receive calls (ReceiveMessage, POP_MESSAGE)", c.receives),
            ("pop_messages_received", "Messages delivered by POP for the first time", c.received),
            ("pop_messages_redelivered", "Messages delivered again by POP after their invisible time", c.redelivered),
            ("pop_acks", "POP acks that ended a message", c.acked),
            ("pop_invisible_time_changes", "Invisible times changed", c.changed),
            ("pop_dead_lettered", "POP messages moved to their group's DLQ after the last attempt", c.dead_lettered),
            ("pop_handles_refused", "Acks and changes refused: invalid or out-of-date receipt handles",
             c.refused_handles),
        ):
            family = CounterMetricFamily(f"ferrymq_broker_{name}", help_, labels=base)
            family.add_metric(labels, value)
            yield family
        per_topic = CounterMetricFamily("ferrymq_broker_pop_group_messages",
                                        "POP deliveries and acks per group and topic", labels=base + ["group", "topic", "op"])
        for (group, topic), (delivered, acked) in sorted(c.by_topic.items()):
            per_topic.add_metric(labels + [group, topic, "delivered"], delivered)
            per_topic.add_metric(labels + [group, topic, "acked"], acked)
        yield per_topic
        inflight = GaugeMetricFamily("ferrymq_broker_pop_in_flight_messages",
                                     "POP messages received and not acked: invisible, or visible again awaiting "
                                     "redelivery", labels=base + ["group", "topic", "state"])
        for (group, topic), (invisible, visible) in sorted(self.pop.in_flight_by_group().items()):
            inflight.add_metric(labels + [group, topic, "invisible"], invisible)
            inflight.add_metric(labels + [group, topic, "visible_again"], visible)
        yield inflight
        held = GaugeMetricFamily("ferrymq_broker_pop_held_receives", "POP receives held by long polling",
                                 labels=base)
        held.add_metric(labels, self.pop.waiting)
        yield held
        journal = GaugeMetricFamily("ferrymq_broker_pop_journal_bytes", "Size of the POP journal", labels=base)
        journal.add_metric(labels, self.pop.journal.size)
        yield journal
