"""Broker counters: messages and bytes in and out per topic (runtime info, later metrics)."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class TopicCounters:
    messages_in: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    bytes_out: int = 0


@dataclass
class BrokerStats:
    boot_timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    topics: dict[str, TopicCounters] = field(default_factory=lambda: defaultdict(TopicCounters))
    sends_refused_busy: int = 0  # answered SYSTEM_BUSY by admission control
    # (monotonic time, total in, total out) samples for rates over the last minute
    _samples: list[tuple[float, int, int]] = field(default_factory=list)

    def record_put(self, topic: str, messages: int, size: int) -> None:
        c = self.topics[topic]
        c.messages_in += messages
        c.bytes_in += size

    def record_busy(self) -> None:
        self.sends_refused_busy += 1

    def record_get(self, topic: str, messages: int, size: int) -> None:
        c = self.topics[topic]
        c.messages_out += messages
        c.bytes_out += size

    @property
    def messages_in(self) -> int:
        return sum(c.messages_in for c in self.topics.values())

    @property
    def messages_out(self) -> int:
        return sum(c.messages_out for c in self.topics.values())

    def rates(self) -> tuple[float, float]:
        """Messages per second in and out since the previous call (at most one minute back)."""
        now = time.monotonic()
        total_in, total_out = self.messages_in, self.messages_out
        self._samples = [s for s in self._samples if now - s[0] <= 60] + [(now, total_in, total_out)]
        t0, in0, out0 = self._samples[0]
        elapsed = now - t0
        if elapsed <= 0:
            return 0.0, 0.0
        return (total_in - in0) / elapsed, (total_out - out0) / elapsed
