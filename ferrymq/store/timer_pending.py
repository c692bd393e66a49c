"""How many timers wait per real topic, and when the first of them is due (docs/timers.md,
operator views): kept up to date as timers are indexed and fired, rebuilt when the timing store
opens.

Memory is bounded by the wheel, not by the number of timers: per topic, one entry per minute
that holds timers (at most 2 * timerMaxDelaySec / 60), each with its count and its earliest
second. The earliest second is exact until timers of that minute fire; firing goes in time
order, so the ones left are due from the second last fired on, which it then holds.

Thread-safe with its own lock, held only for dictionary updates: the event loop may read it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

BUCKET_MS = 60_000


@dataclass(frozen=True)
class TopicTimers:
    topic: str
    count: int  # timers waiting
    earliest_due_ms: int  # when the first of them is due (epoch ms, to the timer precision)
    updated_ms: int  # when the count last changed


class PendingTimers:
    def __init__(self, precision_ms: int) -> None:
        self.precision_ms = precision_ms
        self._lock = threading.Lock()
        # topic -> minute -> [timers due in it, earliest second of them]
        self._buckets: dict[str, dict[int, list[int]]] = {}
        self._counts: dict[str, int] = {}
        self._updated: dict[str, int] = {}
        self.scheduled = 0  # timers indexed since the broker started (not counting a rebuild)

    def _second(self, deliver_ms: int) -> int:
        return deliver_ms - deliver_ms % self.precision_ms

    def add(self, topic: str, deliver_ms: int, *, scheduled: bool = True) -> None:
        second = self._second(deliver_ms)
        with self._lock:
            bucket = self._buckets.setdefault(topic, {}).setdefault(second - second % BUCKET_MS, [0, second])
            bucket[0] += 1
            bucket[1] = min(bucket[1], second)
            self._counts[topic] = self._counts.get(topic, 0) + 1
            self._updated[topic] = int(time.time() * 1000)
            if scheduled:
                self.scheduled += 1

    def remove(self, topic: str, deliver_ms: int, *, fired: bool = True) -> None:
        """One timer of ``topic`` due at ``deliver_ms`` was fired (or, ``fired`` false, is stored
        again as a new timer: a later round, counted anew when indexed)."""
        second = self._second(deliver_ms)
        minute = second - second % BUCKET_MS
        with self._lock:
            buckets = self._buckets.get(topic)
            bucket = buckets.get(minute) if buckets else None
            if bucket is None:
                return  # not counted (indexed before a rebuild that found it fired)
            bucket[0] -= 1
            if fired:
                bucket[1] = max(bucket[1], second)  # the rest of this minute is due from here on
            if not bucket[0]:
                del buckets[minute]
            self._counts[topic] -= 1
            self._updated[topic] = int(time.time() * 1000)
            if not self._counts[topic]:
                del self._counts[topic], self._buckets[topic]

    def clear(self) -> None:
        with self._lock:
            self._buckets.clear()
            self._counts.clear()
            self._updated.clear()

    def by_topic(self) -> list[TopicTimers]:
        """Every topic with timers waiting, by name."""
        with self._lock:
            return [TopicTimers(topic, self._counts[topic], self._buckets[topic][min(self._buckets[topic])][1],
                                self._updated.get(topic, 0))
                    for topic in sorted(self._counts)]
