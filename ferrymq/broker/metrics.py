"""Prometheus metrics of a broker, read from its live state when scraped.

Counters and gauges are computed by a collector at scrape time (no bookkeeping on the send
or pull path); only the flush latency and the held pulls' wake latency are histograms fed as
flushes and wakes happen.
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.runtime_info import group_lags
from ferrymq.store.retention import disk_used_ratio


class BrokerCollector(Collector):
    def __init__(self, ctx: BrokerContext, connection_count: Callable[[], int]) -> None:
        self.ctx = ctx
        self.connection_count = connection_count

    def collect(self) -> Iterator:
        b = self.ctx
        labels = [b.config.broker_cluster_name, b.config.broker_name]
        base = ["cluster", "broker"]
        families = {
            name: CounterMetricFamily(f"ferrymq_broker_{name}", help_, labels=base + ["topic"])
            for name, help_ in (("messages_in", "Messages stored, per topic"), ("bytes_in", "Bytes stored, per topic"),
                                ("messages_out", "Messages delivered by pulls, per topic"),
                                ("bytes_out", "Bytes delivered by pulls, per topic"))
        }
        for topic, c in sorted(b.stats.topics.items()):
            for name, value in (("messages_in", c.messages_in), ("bytes_in", c.bytes_in),
                                ("messages_out", c.messages_out), ("bytes_out", c.bytes_out)):
                families[name].add_metric(labels + [topic], value)
        yield from families.values()

        yield _gauge("held_pulls", "Pull requests held by long polling", base, labels, b.pull_waiters.held)
        yield _gauge("connections", "Open client connections", base, labels, self.connection_count())
        store = b.store
        yield _gauge("store_commitlog_bytes", "Bytes held in the CommitLog (max - min offset)", base, labels,
                     store.max_phy_offset - store.min_phy_offset)
        yield _gauge("store_commitlog_segments", "CommitLog segment files", base, labels, store.commit_log_segments)
        yield _gauge("topics", "Topics configured on this broker", base, labels, len(b.topics.table))
        # The file system of the store: what the disk guard acts on (sends refused above the
        # warning ratio), for alerting before that happens.
        used = disk_used_ratio(b.store_config.store_path_root_dir)
        if used >= 0:
            yield _gauge("store_disk_used_ratio", "Used share of the store's file system (0-1)", base, labels, used)
        yield _gauge("store_disk_warning_ratio", "diskSpaceWarningLevelRatio (0-1): above it sends are refused",
                     base, labels, b.store_config.disk_space_warning_level_ratio / 100)
        backlog = store.write_backlog()
        yield _gauge("store_write_backlog", "Writes queued for the store or running", base, labels, backlog.pending)
        appends = CounterMetricFamily("ferrymq_broker_store_appends", "Puts appended, by where: on the event loop "
                                      "or in the store's writer thread", labels=base + ["where"])
        appends.add_metric(labels + ["loop"], store.appends_on_loop)
        appends.add_metric(labels + ["thread"], store.appends_in_thread)
        yield appends
        reads = CounterMetricFamily("ferrymq_broker_store_pull_reads", "Pull reads, by where: on the event loop "
                                    "(data written lately) or in the read pool", labels=base + ["where"])
        reads.add_metric(labels + ["loop"], store.reads_on_loop)
        reads.add_metric(labels + ["pool"], store.reads_in_pool)
        yield reads
        yield _gauge("store_appends_offloaded", "1 while appends run in the writer thread (after a slow append), "
                     "0 while they run on the event loop", base, labels, int(store.appends_offloaded))
        busy = CounterMetricFamily("ferrymq_broker_sends_refused_busy",
                                   "Sends answered SYSTEM_BUSY by admission control", labels=base)
        busy.add_metric(labels, b.stats.sends_refused_busy)
        yield busy

        lag = GaugeMetricFamily("ferrymq_broker_group_lag_messages",
                                "Messages not yet consumed by a group (max offset - committed offset), per topic",
                                labels=base + ["group", "topic"])
        for group, topic, behind in group_lags(b.store, b.offsets):
            lag.add_metric(labels + [group, topic], behind)
        yield lag
        enabled = GaugeMetricFamily("ferrymq_broker_group_consume_enabled",
                                    "1 while the group may consume, 0 when consumption is disabled", labels=base + ["group"])
        disabled = 0
        for name, group in sorted(b.groups.table.items()):
            enabled.add_metric(labels + [name], 1 if group.consume_enable else 0)
            disabled += 0 if group.consume_enable else 1
        yield enabled
        yield _gauge("groups_disabled", "Subscription groups with consumption disabled", base, labels, disabled)


def _gauge(name: str, help_: str, label_names: list[str], labels: list[str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(f"ferrymq_broker_{name}", help_, labels=label_names)
    g.add_metric(labels, value)
    return g


def broker_registry(ctx: BrokerContext, connection_count: Callable[[], int]) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(ctx, connection_count))
    flush_latency = Histogram("ferrymq_broker_flush_latency_seconds", "Time taken by CommitLog fsyncs",
                              labelnames=["cluster", "broker"],
                              buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
                              registry=registry)
    # From a message's arrival (announced right after its append) to the response of a held pull
    # it woke being written: the long-polling wake path (issue 11: p50 <= 1 ms, p99 <= 5 ms).
    wake_latency = Histogram("ferrymq_broker_pull_wake_latency_seconds",
                             "Time from a message's store to the response of a held pull it woke being written",
                             labelnames=["cluster", "broker"],
                             buckets=(0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
                                      0.01, 0.025, 0.05, 0.1, 0.25, 1),
                             registry=registry)
    ctx.pull_waiters.wake_latency = wake_latency.labels(ctx.config.broker_cluster_name, ctx.config.broker_name).observe
    # labelled like every other broker series, so dashboards and alerts can select by broker
    return registry, flush_latency.labels(ctx.config.broker_cluster_name, ctx.config.broker_name)


