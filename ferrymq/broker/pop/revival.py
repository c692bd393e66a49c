"""When received messages become visible again: one heap of (deadline, seq, queue, offset)
for every delivery out with a consumer, read by the POP service's revive task.

Entries are never removed when a message is acked or its handle replaced: they stay until
their deadline, and the service skips them then (their seq no longer names the delivery).
When stale entries outnumber the live ones (long invisible times), the heap is rebuilt from
the live entries.
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Iterator

from ferrymq.broker.pop.state import InFlight, QueueKey

REBUILD_EVERY = 65536  # look for stale entries every this many pushes past this size

Due = tuple[int, int, QueueKey, int]  # deadline ms, seq, queue, offset


class RevivalSchedule:
    def __init__(self, live: Callable[[], Iterable[tuple[QueueKey, InFlight]]]) -> None:
        """``live()``: every delivery out with a consumer now (to rebuild from)."""
        self._live = live
        self._heap: list[Due] = []

    def __len__(self) -> int:
        """Deadlines held (live ones and not yet discarded stale ones)."""
        return len(self._heap)

    def add(self, key: QueueKey, e: InFlight) -> None:
        heap = self._heap
        heapq.heappush(heap, (e.deadline_ms, e.seq, key, e.offset))
        if len(heap) > REBUILD_EVERY and len(heap) % REBUILD_EVERY == 0:
            live = [(x.deadline_ms, x.seq, k, x.offset) for k, x in self._live()]
            if 2 * len(live) < len(heap):
                heapq.heapify(live)
                self._heap = live

    def due(self, now_ms: int) -> Iterator[Due]:
        """Take the entries whose deadline has come (the caller checks they are still live)."""
        while self._heap and self._heap[0][0] <= now_ms:
            yield heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None
