"""What a POP group has done with one queue: how far it has received, and which received
messages are still unacknowledged (invisible until their deadline, then visible again).

Plain data on the event loop; the service changes it and the journal records each change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

QueueKey = tuple[str, str, int]  # group, topic, queue id


@dataclass
class InFlight:
    """A received, unacknowledged message."""

    offset: int  # in its ConsumeQueue
    commit_log_offset: int
    attempt: int  # deliveries so far (1 after the first)
    seq: int  # names the current delivery / handle; older handles are out of date
    deadline_ms: int  # invisible until then; visible again (to be redelivered) after

    def to_list(self) -> list[int]:
        return [self.offset, self.commit_log_offset, self.attempt, self.seq, self.deadline_ms]

    @classmethod
    def from_list(cls, values: list[int]) -> "InFlight":
        offset, cl_offset, attempt, seq, deadline = values
        return cls(int(offset), int(cl_offset), int(attempt), int(seq), int(deadline))


@dataclass
class QueueState:
    next_offset: int  # the first ConsumeQueue offset never received
    inflight: dict[int, InFlight] = field(default_factory=dict)
    # Held while a receive reads and claims this queue's messages (one reader per queue).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def consume_offset(self) -> int:
        """The offset the group has consumed up to: its first unacknowledged message."""
        return min(self.inflight) if self.inflight else self.next_offset

    def invisible(self, now_ms: int) -> int:
        return sum(1 for e in self.inflight.values() if e.deadline_ms > now_ms)

    def visible_again(self, now_ms: int) -> list[InFlight]:
        """Unacknowledged messages whose invisible time is over, in queue order."""
        return sorted((e for e in self.inflight.values() if e.deadline_ms <= now_ms), key=lambda e: e.offset)

    def blocked(self, now_ms: int) -> bool:
        """FIFO: some message of the queue is out with a consumer."""
        return any(e.deadline_ms > now_ms for e in self.inflight.values())
