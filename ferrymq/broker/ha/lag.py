"""How far each slave is behind, in bytes and in seconds, as metrics and runtime info show it.

Bytes are the master's CommitLog head minus what the slave acknowledged (replication.status).
Seconds come from a small timeline of (CommitLog head, when it was reached) that every store
arrival feeds: a slave that acknowledged offset A is as many seconds behind as it is since the
master first had a byte past A; 0 when it has everything. The timeline is kept on every role
(a slave promoted to master has it ready) and stays small: points closer than ``resolution``
are merged, and when it is full every two neighbouring points become one (older data gets
coarser; a figure is never lower than the truth by more than one point's spacing, and is
rounded up, not down, by merging).

A slave cannot say the same from its side: the HA protocol tells it the master's transfer
position for it, not the master's head, so its lag in seconds is left to the master.
"""

from __future__ import annotations

import time
from typing import Callable

from ferrymq.broker.ha.replication import Replication
from ferrymq.store.asyncio_store import AsyncMessageStore

Clock = Callable[[], float]


class HeadTimeline:
    """(offset, time) points, offsets and times rising: the head reached ``offset`` at ``time``
    (for a merged point: at the earliest time of the points merged)."""

    def __init__(self, resolution: float = 0.05, max_points: int = 1024) -> None:
        if max_points < 2:
            raise ValueError("a head timeline needs room for at least 2 points")
        self.resolution = resolution
        self.max_points = max_points
        self.points: list[tuple[int, float]] = []

    def advanced(self, head: int, now: float) -> None:
        points = self.points
        if points:
            last_offset, last_time = points[-1]
            if head <= last_offset:
                return
            if now - last_time < self.resolution and len(points) > 1:
                points[-1] = (head, last_time)  # same instant: the point covers the new bytes too
                return
        points.append((head, now))
        if len(points) > self.max_points:
            # Merge neighbours: each pair keeps the later offset and the earlier time.
            merged = [(points[i + 1][0], points[i][1]) for i in range(0, len(points) - 1, 2)]
            if len(points) % 2:
                merged.append(points[-1])
            self.points = merged

    def seconds_behind(self, acked: int, now: float) -> float:
        """Seconds since the head first passed ``acked`` (0 if it never did)."""
        points = self.points
        if not points or acked >= points[-1][0]:
            return 0.0
        lo, hi = 0, len(points) - 1  # the first point whose offset is past ``acked``
        while lo < hi:
            mid = (lo + hi) // 2
            if points[mid][0] > acked:
                hi = mid
            else:
                lo = mid + 1
        return max(0.0, now - points[lo][1])

    def forget_through(self, offset: int) -> None:
        """Drop points no slave can be behind any more (every one acknowledged past them);
        the newest point always stays."""
        points = self.points
        keep = 0
        while keep < len(points) - 1 and points[keep + 1][0] <= offset:
            keep += 1
        if keep:
            del points[:keep]


class ReplicationLag:
    """The replication status (role, slaves, lag bytes) with each slave's lag in seconds."""

    def __init__(self, store: AsyncMessageStore, replication: Replication, clock: Clock = time.monotonic) -> None:
        self.store = store
        self.replication = replication
        self.clock = clock
        self.timeline = HeadTimeline()
        store.write_listeners.append(self._on_write)

    def loaded(self) -> None:
        """The store has loaded: what it holds was there at least since now."""
        self.timeline.advanced(self.store.max_phy_offset, self.clock())

    def _on_write(self, end: int) -> None:
        self.timeline.advanced(end, self.clock())

    def status(self) -> dict:
        """``Replication.status()`` plus, on a master, ``lagSeconds`` per slave and
        ``ackedByAnySlave`` (the highest offset any slave acknowledged, RocketMQ's
        push2SlaveMaxOffset)."""
        status = self.replication.status()
        slaves = status.get("slaves")
        master = self.replication.master
        if master is not None:
            status["ackedByAnySlave"] = master.acked_offset
        if slaves is not None:
            now = self.clock()
            head = status["maxPhyOffset"]
            self.timeline.advanced(head, now)
            for slave in slaves:
                acked = slave["ackedOffset"]
                slave["lagSeconds"] = round(self.timeline.seconds_behind(acked if acked >= 0 else -1, now), 3)
            if slaves:
                self.timeline.forget_through(min(s["ackedOffset"] for s in slaves))
        return status

