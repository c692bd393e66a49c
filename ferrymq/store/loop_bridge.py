"""The threads behind the store's asyncio face (store/asyncio_store.py) and the loop they answer.

- ``WriterThread``: the store's one writer; runs queued calls in order, all that queued up per
  wake-up, and tells admission control how far behind it is (``WriteBacklog``).
- ``LoopCompletions``: completes asyncio futures (and runs calls) from other threads with one
  loop wake-up per batch, not per future.
- ``FlushWaits``: SYNC_FLUSH puts of one loop waiting for their fsync, with at most one request
  to the store's group-commit thread at a time; ``Deadlines`` times them out with one timer.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ferrymq.store.message_store import MessageStore

_CALL = object()  # marks a call posted to the loop among future completions


class LoopCompletions:
    """Completes asyncio futures (and runs calls) from other threads with one loop wake-up per batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[Any, Any, Any]] = []
        self._scheduled = False

    def complete(self, future: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
        self._post((future, result, error))

    def call(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Run ``fn(arg)`` on the loop, in the same wake-up as completions posted with it."""
        self._post((fn, arg, _CALL))

    def _post(self, item: tuple[Any, Any, Any]) -> None:
        with self._lock:
            self._pending.append(item)
            if self._scheduled:
                return  # the wake-up already asked for will take this one too
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending, self._scheduled = self._pending, [], False
        for target, result, error in batch:
            if error is _CALL:
                target(result)
            elif target.done():  # cancelled meanwhile (a timed-out wait)
                continue
            elif error is not None:
                target.set_exception(error)
            else:
                target.set_result(result)


class Deadlines:
    """Resolves futures with None once their deadline passes, with one timer for all of them.

    SYNC_FLUSH waits all have the same timeout, so they expire in the order they began: a deque
    in that order, pruned of answered waits as new ones come, and one ``call_at`` for the oldest
    (``asyncio.wait_for`` per send cost a timer, a waiter future and an extra callback each)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waits: collections.deque[tuple[float, asyncio.Future]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, future: asyncio.Future, timeout_s: float) -> None:
        waits = self._waits
        while waits and waits[0][1].done():
            waits.popleft()
        deadline = self.loop.time() + timeout_s
        if waits and deadline < waits[-1][0]:  # a shorter timeout than before (config changed)
            deadline = waits[-1][0]  # keeps the order; such a wait ends no later than the one before
        waits.append((deadline, future))
        if self._timer is None:
            self._timer = self.loop.call_at(waits[0][0], self._expire)

    def _expire(self) -> None:
        self._timer = None
        waits, now = self._waits, self.loop.time()
        while waits and (waits[0][1].done() or waits[0][0] <= now):
            _, future = waits.popleft()
            if not future.done():
                future.set_result(None)
        if waits:
            self._timer = self.loop.call_at(waits[0][0], self._expire)


class FlushWait:
    """Puts waiting for the CommitLog to be fsynced up to ``end``, all on one future."""

    __slots__ = ("end", "future", "puts")

    def __init__(self, end: int, future: asyncio.Future[bool | None]) -> None:
        self.end, self.future, self.puts = end, future, 1


class FlushWaits:
    """SYNC_FLUSH puts of one loop waiting for their fsync, with at most one request to the
    group-commit thread at a time.

    Puts append in CommitLog order on the loop, so their waits are a deque in offset order
    (but for a put the writer thread appended, which may come a little late: it is answered
    with the wait in front of it). Only the first wait asks the flush thread for an fsync;
    waits that come while it runs queue here, and when it reports back (one cross-thread
    call per fsync, however many puts it covered) every wait up to the offset now durable is
    answered and, if some remain, the next fsync is asked for all of them. Before, each put made its own request: a Condition
    notify on the loop and a callback plus a lock in the flush thread per put, the flush
    thread taking the GIL once per acknowledgement."""

    def __init__(self, completions: LoopCompletions, store: MessageStore) -> None:
        self._completions = completions
        self._store = store
        self._deadlines = Deadlines(completions.loop)  # the waits' syncFlushTimeout, one timer for all
        self._waits: collections.deque[FlushWait] = collections.deque()  # in offset order
        self._asked: int | None = None  # the end offset of the fsync request that is out, if one is
        self._max_end = 0  # the furthest end a wait needs fsynced

    def add(self, end: int, timeout_s: float) -> asyncio.Future[bool | None]:
        """A future resolved with True once the CommitLog is fsynced up to ``end``, False if the
        fsync failed, None after ``timeout_s``; the same future as the wait before when that
        one waits for the same end."""
        last = self._waits[-1] if self._waits else None
        if last is not None and last.end == end and not last.future.done():
            last.puts += 1  # waits for the same end share one future (the sends of a round)
            return last.future
        future: asyncio.Future[bool | None] = self._completions.loop.create_future()
        # (Reset when no wait is left: a CommitLog truncated back, a slave rejoining, ends lower.)
        self._max_end = max(self._max_end, end) if self._waits else end
        self._waits.append(FlushWait(end, future))
        self._deadlines.add(future, timeout_s)
        if self._asked is None:
            self._ask(self._max_end)
        return future

    def _ask(self, end: int) -> None:
        self._asked = end
        # Called by the group-commit thread after its fsync; the loop runs _answered (and counts).
        self._store.request_flush(end, functools.partial(self._completions.call, self._answered), acks=0)

    def _answered(self, ok: bool) -> None:
        # A failed fsync fails the waits it was asked for (their bytes may not be on disk);
        # later ones get the next fsync.
        covered, answer = (self._store.flushed_phy_offset, True) if ok else (self._asked, False)
        self._asked = None
        waits, answered = self._waits, 0
        while waits and waits[0].end <= covered:
            wait = waits.popleft()
            if not wait.future.done():  # (not timed out meanwhile)
                wait.future.set_result(answer)
                answered += wait.puts
        if answered:
            self._store.count_flush_acks(answered)
        while waits and waits[0].future.done():
            waits.popleft()
        if waits:
            self._ask(self._max_end)


@dataclass(frozen=True)
class WriteBacklog:
    """The writer thread's queue as admission control sees it."""

    pending: int  # writes queued or running
    oldest_wait_ms: int  # how long the oldest queued write has waited to start
    running_ms: int  # how long the running write has run (a slow disk holds every put)


IDLE_BACKLOG = WriteBacklog(pending=0, oldest_wait_ms=0, running_ms=0)


class WriterThread:
    """The store's one writer: runs queued calls in order, all that queued up per wake-up."""

    def __init__(self) -> None:
        self._jobs: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="store-write", daemon=True)
        # Backlog, read by the loop for admission control without taking the lock: each
        # counter has one writer; deque append/popleft are atomic.
        self._submitted = 0  # loop thread
        self._finished = 0  # writer thread
        self._enqueued_at: collections.deque[float] = collections.deque()  # of jobs not started yet
        self._running_since: float | None = None

    def backlog(self) -> "WriteBacklog":
        if self._submitted == self._finished:  # the common case, asked on every send: nothing queued
            return IDLE_BACKLOG
        now = time.monotonic()
        enqueued = self._enqueued_at
        oldest = enqueued[0] if enqueued else None
        running = self._running_since
        return WriteBacklog(pending=self._submitted - self._finished,
                            oldest_wait_ms=0 if oldest is None else int((now - oldest) * 1000),
                            running_ms=0 if running is None else int((now - running) * 1000))

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def idle(self) -> bool:
        """Nothing queued or running: a write done elsewhere now cannot overtake one of ours."""
        return self._submitted == self._finished

    def submit(self, completions: LoopCompletions, future: asyncio.Future, fn: Callable, args: tuple, kwargs: dict) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("the store's writer thread has stopped")
            self._jobs.append((completions, future, fn, args, kwargs))
            self._submitted += 1
            self._enqueued_at.append(time.monotonic())
            if len(self._jobs) == 1:
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    self._cond.wait()
                if not self._jobs:
                    return
                jobs = list(self._jobs)
                self._jobs.clear()
            for completions, future, fn, args, kwargs in jobs:
                self._running_since = time.monotonic()
                self._enqueued_at.popleft()
                result = error = None
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # delivered to the awaiting coroutine
                    error = exc
                # Counted as finished before its caller hears of it: the caller's next put must
                # find the thread idle (and may then run on the loop).
                self._running_since = None
                self._finished += 1
                completions.complete(future, result, error)
