"""Held requests: a pull (or a POP receive) that found nothing waits here until a message
arrives for it, its hold time ends, or the broker stops.

No timer loop: :class:`Waiters` is one table of futures per key (a queue for pulls, a topic
for POP receives); an arrival resolves the futures of its key whose requested offset is now
below the queue's max offset (pulls) and whose subscription wants one of the messages that
arrived (a tag- or SQL-filtered subscription is not woken by messages it would not receive).
The held request re-runs its read when woken.

A pull reads the store in a worker thread and registers here afterwards; a message stored
in between was announced before the waiter existed. ``PullWaiters.wait`` therefore compares
the queue's max offset with the pull's offset first (RocketMQ closes the same gap with a 5 s
re-check of every held pull; the pull processor keeps that too, as a safety net). A POP
receive registers before it reads instead (pop/service.py).

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
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Sequence, TypeVar

from ferrymq.common.message import MessageExt

Wants = Callable[[MessageExt], bool]  # does the held request's subscription want this message
K = TypeVar("K", bound=Hashable)
NO_OFFSET = -1  # a waiter woken by any arrival of its key, whatever the queue's max offset


@dataclass(eq=False)
class Waiter:
    """One held request: resolved with the time the waking arrival was announced, or None."""

    wants: Wants | None = None
    offset: int = NO_OFFSET  # woken only once the queue's max offset is past it
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Waiters(Generic[K]):
    """Held requests per key, woken by arrivals; ``close`` answers them all and holds no more."""

    def __init__(self) -> None:
        self._by_key: dict[K, list[Waiter]] = defaultdict(list)
        self.closed = False

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def add(self, key: K, wants: Wants | None = None, offset: int = NO_OFFSET) -> Waiter:
        waiter = Waiter(wants, offset)
        self._by_key[key].append(waiter)
        return waiter

    def remove(self, key: K, waiter: Waiter) -> None:
        waiters = self._by_key.get(key)
        if waiters is None:
            return
        try:
            waiters.remove(waiter)
        except ValueError:
            pass
        if not waiters:
            del self._by_key[key]

    async def wait(self, waiter: Waiter, timeout: float) -> float | None:
        """The announcement time of the arrival that woke ``waiter`` within ``timeout`` seconds;
        None on timeout or shutdown. The caller removes the waiter afterwards."""
        if self.closed:
            return None
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that arrives just as the future completes, and shutdown would then hang.
            async with asyncio.timeout(timeout):
                arrived_at = await waiter.future
        except TimeoutError:
            return None
        return None if self.closed else arrived_at

    def wake(self, key: K, msgs: Sequence[MessageExt] = (), max_offset: int | None = None) -> None:
        """Arrival listener: wake the waiters of ``key`` that ``msgs`` are for (all of them when
        ``msgs`` is empty: a change other than an arrival), those of a pull only once
        ``max_offset`` is past the offset they wait at."""
        waiters = self._by_key.get(key)
        if not waiters:
            return
        now = 0.0
        for waiter in waiters:
            if waiter.future.done() or (max_offset is not None and waiter.offset >= max_offset):
                continue
            if waiter.wants is not None and msgs and not any(map(waiter.wants, msgs)):
                continue
            now = now or time.perf_counter()
            waiter.future.set_result(now)

    def close(self) -> None:
        """Shutdown: answer every held request now, and hold none from here on."""
        self.closed = True
        for waiters in self._by_key.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_result(None)


class PullWaiters:
    """Held pulls, keyed by (topic, queue id)."""

    def __init__(self, max_offset: Callable[[str, int], int]) -> None:
        """``max_offset(topic, queue_id)``: the queue's next offset as the store has it now."""
        self._max_offset = max_offset
        self._waiters: Waiters[tuple[str, int]] = Waiters()
        # Observes the seconds from an arrival to the answer of a pull it woke (metrics.py sets it).
        self.wake_latency: Callable[[float], None] | None = None

    @property
    def held(self) -> int:
        return self._waiters.held

    @property
    def closed(self) -> bool:
        """The broker is stopping: nothing is held any more."""
        return self._waiters.closed

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
        key = (topic, queue_id)
        waiter = self._waiters.add(key, wants, offset)
        try:
            return await self._waiters.wait(waiter, timeout)
        finally:
            self._waiters.remove(key, waiter)

    def notify(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt] = ()) -> None:
        """Store arrival listener: wake the waiters the new messages are for."""
        self._waiters.wake((topic, queue_id), msgs, max_offset)

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
        self._waiters.close()
