"""Held pulls: a pull that found nothing waits here until a message arrives for its queue.

No timer loop: each waiter is a future keyed by (topic, queue id); an arrival resolves the
futures whose requested offset is now below the queue's max offset and whose subscription
wants one of the messages that arrived (a tag- or SQL-filtered subscription is not woken by
messages it would not receive). The pull processor re-runs its read when woken, and answers
PULL_NOT_FOUND when its suspend time ends.

A pull reads the store in a worker thread and registers here afterwards; a message stored
in between was announced before the waiter existed. ``wait`` therefore compares the queue's
max offset with the pull's offset first (RocketMQ closes the same gap with a 5 s re-check
of every held pull; the pull processor keeps that too, as a safety net).

Wake latency (``ferrymq_broker_pull_wake_latency_seconds``): an arrival that wakes a waiter
hands it the time it was announced (right after the append, on the loop); the pull processor
passes that time to :meth:`PullWaiters.answered` with its response, and the latency is observed
once the response frame has been handed to the socket. One clock read per waking arrival and
one callback per woken pull; nothing for pulls answered at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Callable, Sequence

from ferrymq.common.message import MessageExt

Wants = Callable[[MessageExt], bool]  # does the held pull's subscription want this message


class PullWaiters:
    def __init__(self, max_offset: Callable[[str, int], int]) -> None:
        """``max_offset(topic, queue_id)``: the queue's next offset as the store has it now."""
        self._max_offset = max_offset
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future, Wants | None]]] = defaultdict(list)
        self.closed = False  # the broker is stopping: nothing is held any more
        # Observes the seconds from an arrival to the answer of a pull it woke (metrics.py sets it).
        self.wake_latency: Callable[[float], None] | None = None

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float,
                   wants: Wants | None = None) -> float | None:
        """Wait until a message at or after ``offset`` that ``wants`` accepts arrives, or
        ``timeout`` seconds. Returns the ``time.perf_counter()`` at which the arrival that woke
        the pull was announced; None when it returns for another reason: the queue already
        holds messages past ``offset`` (stored between the pull's read and now), timeout, shutdown."""
        if timeout <= 0 or self.closed:
            return None
        if self._max_offset(topic, queue_id) > offset:
            return None  # stored between the pull's read and now: read again at once
        fut = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        entry = (offset, fut, wants)
        self._waiters[key].append(entry)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that arrives just as the future completes, and shutdown would then hang.
            async with asyncio.timeout(timeout):
                arrived_at = await fut
            return None if self.closed else arrived_at
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    del self._waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt] = ()) -> None:
        """Store arrival listener: wake the waiters the new messages are for."""
        waiters = self._waiters.get((topic, queue_id))
        if not waiters:
            return
        now = 0.0
        for offset, fut, wants in waiters:
            if offset >= max_offset or fut.done():
                continue
            if wants is not None and msgs and not any(map(wants, msgs)):
                continue
            now = now or time.perf_counter()
            fut.set_result(now)

    def answered(self, arrived_at: float | None) -> None:
        """A held pull's response is being returned to the connection, which writes it before
        this loop pass ends (at once, or in its end-of-pass flush scheduled earlier): observe
        the wake latency in a callback that runs after that write."""
        if arrived_at is not None and self.wake_latency is not None:
            asyncio.get_running_loop().call_soon(self._observe, arrived_at)

    def _observe(self, arrived_at: float) -> None:
        if self.wake_latency is not None:
            self.wake_latency(time.perf_counter() - arrived_at)

    def close(self) -> None:
        """Shutdown: answer every held pull now, and hold none from here on."""
        self.closed = True
        for waiters in self._waiters.values():
            for _, fut, _ in waiters:
                if not fut.done():
                    fut.set_result(None)
