"""The Overview page's data: every broker of a cluster with its role, disk and traffic, the
cluster's message in/out rates over the last minutes, and the alerts derived from them.

A sampler reads each cluster every ``sample_seconds`` (and when a page asks, at most once a
second), and keeps the rates for ``history_minutes``. Rates come from the brokers' message
counters (differences between two samples), so they cover the whole interval."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from ferrymq.client.errors import MQClientError
from ferrymq.common.tasks import TaskSet
from ferrymq.console.alerts import BrokerState, derive_alerts
from ferrymq.console.connections import ClusterConnection, Connections

log = logging.getLogger(__name__)

FRESH_SECONDS = 1.0  # a page's request reuses a sample this young
MIN_RATE_INTERVAL = 0.05  # seconds: two samples closer than this give no rate


def _number(text: str | None, default: float = 0.0) -> float:
    try:
        return float((text or "").split()[0])
    except (ValueError, IndexError):
        return default


@dataclass
class ClusterHistory:
    points: deque  # (epoch ms, in/s, out/s)
    last_totals: dict[str, tuple[float, int, int]] = field(default_factory=dict)  # address -> (t, in, out)
    seen: set[str] = field(default_factory=set)  # broker names registered at some point
    snapshot: dict | None = None
    taken: float = 0.0  # monotonic time of the snapshot
    last_point: float = float("-inf")  # monotonic time of the newest rate point
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class OverviewSampler:
    def __init__(self, connections: Connections, sample_seconds: float, history_minutes: float) -> None:
        self.connections = connections
        self.sample_seconds = sample_seconds
        keep = max(2, int(history_minutes * 60 / sample_seconds) + 1)
        self._history = {c.name: ClusterHistory(deque(maxlen=keep)) for c in connections}
        self._tasks = TaskSet("console overview", log)

    def start(self) -> None:
        self._tasks.every(self.sample_seconds, self.sample_all, name="sample clusters",
                          quiet=(MQClientError, OSError, asyncio.TimeoutError))

    async def stop(self) -> None:
        await self._tasks.close()

    async def sample_all(self) -> None:
        for connection in self.connections:
            await self.overview(connection, max_age=0)

    async def overview(self, connection: ClusterConnection, max_age: float = FRESH_SECONDS) -> dict:
        history = self._history[connection.name]
        async with history.lock:
            if history.snapshot is None or time.monotonic() - history.taken > max_age:
                history.snapshot = await self._take(connection, history)
                history.taken = time.monotonic()
            return history.snapshot

    async def _take(self, connection: ClusterConnection, history: ClusterHistory) -> dict:
        admin = connection.admin
        now_ms = int(time.time() * 1000)
        try:
            info = await admin.cluster_info()
        except (MQClientError, OSError, asyncio.TimeoutError) as e:
            alerts = derive_alerts(namesrv_error=str(e), brokers=[], seen_before=history.seen, masters_by_name={},
                                   disabled_groups=[])
            return {"cluster": connection.name, "namesrv": connection.spec.namesrv_addr, "time": now_ms,
                    "brokers": [], "alerts": [a.to_dict() for a in alerts], "rates": list(history.points),
                    "topics": None, "groups": None, "sampleSeconds": self.sample_seconds}
        # A rate point per sample interval, however often pages ask in between.
        record = time.monotonic() - history.last_point >= 0.9 * self.sample_seconds
        rows, states = [], []
        rate_in = rate_out = 0.0
        measured = False
        for cluster, names in sorted(info.cluster_addr_table.items()):
            for name in sorted(names):
                data = info.broker_addr_table.get(name)
                for broker_id, addr in sorted((data.broker_addrs if data else {}).items()):
                    state = BrokerState(cluster, name, broker_id, addr)
                    row = {"cluster": cluster, "brokerName": name, "brokerId": broker_id, "address": addr,
                           "role": "MASTER" if broker_id == 0 else "SLAVE"}
                    try:
                        runtime = await admin.broker_runtime_info(addr)
                        config = await admin.broker_config(addr)
                    except (MQClientError, OSError, asyncio.TimeoutError) as e:
                        state.error = str(e) or type(e).__name__
                        row["error"] = state.error
                    else:
                        state.disk_ratio = _number(runtime.get("commitLogDiskRatio"), None)
                        state.disk_warning_ratio = _number(config.get("diskSpaceWarningLevelRatio"), 90) / 100
                        totals = (time.monotonic(), int(_number(runtime.get("msgPutTotalTodayNow"))),
                                  int(_number(runtime.get("msgGetTotalTodayNow"))))
                        broker_in, broker_out = self._rates(history, addr, totals, record)
                        if broker_in is not None:
                            measured = True
                            rate_in += broker_in
                            rate_out += broker_out
                        boot = int(_number(runtime.get("bootTimestamp")))
                        row.update({
                            "role": config.get("brokerRole") or row["role"],
                            "version": runtime.get("ferrymqVersion") or runtime.get("brokerVersionDesc"),
                            "diskRatio": state.disk_ratio, "diskWarningRatio": state.disk_warning_ratio,
                            "commitLogBytes": int(_number(runtime.get("commitLogMaxOffset")))
                            - int(_number(runtime.get("commitLogMinOffset"))),
                            "inRate": broker_in if broker_in is not None else _number(runtime.get("putTps")),
                            "outRate": broker_out if broker_out is not None else _number(runtime.get("getTransferedTps")),
                            "messagesIn": totals[1], "messagesOut": totals[2],
                            "heldPulls": int(_number(runtime.get("ferrymqHeldPulls"))),
                            "uptimeMs": max(0, now_ms - boot) if boot else None})
                    rows.append(row)
                    states.append(state)
        if record:
            history.last_point = time.monotonic()
            if measured:
                history.points.append((now_ms, round(rate_in, 3), round(rate_out, 3)))
        registered = {s.broker_name for s in states}
        masters = {name: bool(data.master_addr()) for name, data in info.broker_addr_table.items()}
        disabled, groups, topics = [], None, None
        try:
            group_table = await admin.list_groups()
            groups = len(group_table)
            disabled = [g for g, by_broker in group_table.items() if not all(c.consume_enable for c in by_broker.values())]
            topics = len(await admin.topic_list())
        except (MQClientError, OSError, asyncio.TimeoutError) as e:
            log.debug("overview of %s: groups/topics not read: %s", connection.name, e)
        alerts = derive_alerts(namesrv_error=None, brokers=states, seen_before=history.seen, masters_by_name=masters,
                               disabled_groups=disabled)
        history.seen |= registered
        return {"cluster": connection.name, "namesrv": connection.spec.namesrv_addr, "time": now_ms, "brokers": rows,
                "alerts": [a.to_dict() for a in alerts], "rates": list(history.points), "topics": topics,
                "groups": groups, "sampleSeconds": self.sample_seconds}

    @staticmethod
    def _rates(history: ClusterHistory, addr: str, totals: tuple[float, int, int],
               record: bool) -> tuple[float | None, float | None]:
        """Messages per second in and out since this broker's previous recorded sample (None
        the first time, and after a restart reset its counters). No message goes uncounted:
        a sample too close to the previous one to measure leaves the counters to the next."""
        previous = history.last_totals.get(addr)
        if previous is None or totals[1] < previous[1] or totals[2] < previous[2]:
            history.last_totals[addr] = totals
            return None, None
        elapsed = totals[0] - previous[0]
        if elapsed < MIN_RATE_INTERVAL:
            return None, None
        if record:
            history.last_totals[addr] = totals
        return (totals[1] - previous[1]) / elapsed, (totals[2] - previous[2]) / elapsed
