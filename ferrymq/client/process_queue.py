"""ProcessQueue: the messages a push consumer has pulled from one queue and not yet finished.

It is what flow control measures (count, bytes, offset span) and what decides the offset a
consumer may commit: the lowest offset still in flight, so a slow message is never skipped
by a fast one behind it (concurrent listeners), or the end of the batch just committed
(orderly listeners). Everything runs on the event loop, so no locking is needed; the
``consume_lock`` only keeps a rebalance from releasing an orderly queue mid-listener-call.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time

from ferrymq.common.message import MessageExt
from ferrymq.common.tasks import within

LOCK_MAX_LIVE = 30.0  # rocketmq.client.rebalance.lockMaxLiveTime: trust a lock this long after renewal
PULL_MAX_IDLE = 120.0  # a queue not pulled for this long is dropped and re-created by the rebalance


class ProcessQueue:
    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self.msg_count = 0
        self.msg_size = 0  # body bytes
        self.queue_offset_max = 0
        self._dropped = False
        self._room = asyncio.Event()  # set when messages leave (or the queue is dropped): flow control waits on it
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        self.consuming = False  # orderly: a consume task is (or will be) running for this queue
        self._taken: dict[int, MessageExt] = {}  # orderly: handed to the listener, not committed
        self.consume_lock = asyncio.Lock()
        self.try_unlock_times = 0

    # ------------------------------------------------------------------ both listener kinds

    def put(self, msgs: list[MessageExt]) -> bool:
        """Add pulled messages; True when an orderly consume task should be started."""
        for m in msgs:
            if m.queue_offset in self._msgs:
                continue
            self._msgs[m.queue_offset] = m
            if not self._offsets or m.queue_offset > self._offsets[-1]:
                self._offsets.append(m.queue_offset)
            else:
                bisect.insort(self._offsets, m.queue_offset)
            self.msg_count += 1
            self.msg_size += len(m.body)
            self.queue_offset_max = max(self.queue_offset_max, m.queue_offset)
        if self._msgs and not self.consuming:
            self.consuming = True
            return True
        return False

    def max_span(self) -> int:
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    @property
    def dropped(self) -> bool:
        return self._dropped

    @dropped.setter
    def dropped(self, value: bool) -> None:
        self._dropped = value
        if value:
            self._room.set()  # a pull loop waiting for room ends

    async def wait_for_room(self, timeout: float) -> None:
        """Return once messages have left this queue (consumed, committed, cleared) or it was
        dropped; at the latest after ``timeout`` s. Call it right after finding the queue full."""
        self._room.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await within(self._room.wait(), timeout)

    def _remove_one(self, offset: int) -> MessageExt | None:
        m = self._msgs.pop(offset, None)
        if m is not None:
            del self._offsets[bisect.bisect_left(self._offsets, offset)]
        return m

    # ------------------------------------------------------------------ concurrent listeners

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset now safe to commit (-1: nothing was held)."""
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        for m in msgs:
            if self._remove_one(m.queue_offset) is not None:
                self.msg_count -= 1
                self.msg_size -= len(m.body)
        if self._offsets:
            result = self._offsets[0]
        self.last_consume_time = time.monotonic()
        self._room.set()
        return result

    # ------------------------------------------------------------------ orderly listeners

    def take(self, n: int) -> list[MessageExt]:
        """The next ``n`` messages in offset order; clears ``consuming`` when there are none."""
        taken = []
        while self._offsets and len(taken) < n:
            m = self._remove_one(self._offsets[0])
            self._taken[m.queue_offset] = m
            taken.append(m)
        if not taken:
            self.consuming = False
        self.last_consume_time = time.monotonic()
        return taken

    def commit(self) -> int:
        """The taken messages are done: returns the offset after them (-1 if none were taken)."""
        if not self._taken:
            return -1
        offset = max(self._taken) + 1
        self.msg_count -= len(self._taken)
        self.msg_size -= sum(len(m.body) for m in self._taken.values())
        self._taken.clear()
        self._room.set()
        return offset

    def make_consume_again(self, msgs: list[MessageExt]) -> None:
        """Put taken messages back in front: the listener sees them again, in the same order."""
        for m in msgs:
            if self._taken.pop(m.queue_offset, None) is not None:
                self._msgs[m.queue_offset] = m
                bisect.insort(self._offsets, m.queue_offset)

    def clear(self) -> None:
        self._msgs.clear()
        self._offsets.clear()
        self._taken.clear()
        self.msg_count = self.msg_size = 0
        self.queue_offset_max = 0
        self._room.set()

    # ------------------------------------------------------------------ leases

    def lock_expired(self) -> bool:
        return time.monotonic() - self.last_lock_time > LOCK_MAX_LIVE

    def pull_expired(self) -> bool:
        return time.monotonic() - self.last_pull_time > PULL_MAX_IDLE
