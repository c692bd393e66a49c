"""Background task plumbing shared by the broker, the name server and the clients.

``InFlight`` counts calls in progress so that a shutdown can wait (bounded) until none is.
``TaskSet`` owns the tasks an object starts: it keeps a strong reference to each (the event
loop keeps only weak ones), logs a task that dies of an exception once, and cancels and
awaits all of them on ``close()``. ``run_every`` is the one periodic loop: a failing round is
logged once per failure streak and the next round still runs. ``within`` bounds an await in
time, as ``asyncio.wait_for`` does, without losing a cancellation. ``IdleLimit`` bounds the
silence of a stream read in a loop: one timer for the whole loop, not one per read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Coroutine, TypeVar

__all__ = ["IdleLimit", "InFlight", "TaskSet", "run_every", "within"]

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """``await aw``, raising ``TimeoutError`` after ``seconds`` (None: no limit).

    Used instead of ``asyncio.wait_for``: on Python 3.11, a task cancelled while the awaitable it
    waits for has just completed gets the result and loses the cancellation. A loop that reads a
    busy socket (a slave replicating a stream of records) then cannot be stopped, and whoever
    awaits its end (a slave being promoted) waits for ever. ``asyncio.timeout`` keeps it.
    """
    async with asyncio.timeout(seconds):
        return await aw


class IdleLimit:
    """``async with IdleLimit(seconds, what):`` raises ``TimeoutError(what)`` in the task once
    ``seconds`` pass without a call to ``touch()`` (a connection that reads in a loop calls it
    after each read).

    ``touch`` only notes the time: the one timer looks at it when it fires and, if something was
    read meanwhile, sleeps again until the new deadline. A ``within`` around each read would arm
    and cancel a timer per read, which a replication stream of small frames pays per message.
    """

    __slots__ = ("_seconds", "_what", "_loop", "_task", "_last", "_timer", "_expired")

    def __init__(self, seconds: float, what: str) -> None:
        self._seconds = seconds
        self._what = what
        self._expired = False

    async def __aenter__(self) -> "IdleLimit":
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + self._seconds, self._check)
        return self

    def touch(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        deadline = self._last + self._seconds
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._check)
        else:
            self._expired = True
            self._task.cancel()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._timer.cancel()
        # Our own cancellation, not someone else's (the task's uncancel count says whether another
        # cancel() came too: then it stays a cancellation, as asyncio.timeout does).
        if self._expired and exc_type is asyncio.CancelledError and self._task.uncancel() == 0:
            raise TimeoutError(self._what) from exc


class InFlight:
    """Calls in progress, entered with ``with in_flight:``; ``wait_idle`` returns when none is."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> "InFlight":
        self._count += 1
        self._idle.clear()
        return self

    def __exit__(self, *exc) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    def __len__(self) -> int:
        return self._count

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in progress, at most ``timeout`` s; False if some still is."""
        try:
            await within(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True


class TaskSet:
    """The background tasks of one owner (a broker, a consumer, ...)."""

    def __init__(self, owner: str, logger: logging.Logger | None = None) -> None:
        self._owner = owner
        self._log = logger or logging.getLogger(__name__)
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine, name: str | None = None) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def every(self, seconds: float, fn: Callable[[], Awaitable[object]], name: str | None = None,
              *, quiet: tuple[type[BaseException], ...] = ()) -> asyncio.Task:
        """Spawn ``run_every(seconds, fn)``."""
        return self.spawn(run_every(seconds, fn, self._log, quiet=quiet),
                          name=name or getattr(fn, "__name__", None))

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s: background task %s failed", self._owner, task.get_name(),
                            exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self):
        return iter(set(self._tasks))

    async def close(self, timeout: float | None = None) -> None:
        """Cancel every task and wait until all have ended (their errors are not raised); with
        ``timeout``, wait at most that long and log the tasks that did not stop."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, stuck = await asyncio.wait(tasks, timeout=timeout)
        for task in stuck:
            self._log.warning("%s: task %s did not stop within %s s", self._owner, task.get_name(), timeout)


async def run_every(seconds: float, fn: Callable[[], Awaitable[object]], logger: logging.Logger | None = None,
                    *, quiet: tuple[type[BaseException], ...] = ()) -> None:
    """Await ``fn()`` every ``seconds`` until cancelled.

    A failure does not end the loop (a full disk must not stop offset persistence for good).
    It is logged once per streak of failures, and once more when the task recovers; errors of
    the ``quiet`` types (expected ones, such as an unreachable name server) are logged at debug.
    """
    log = logger or logging.getLogger(__name__)
    name = getattr(fn, "__name__", repr(fn))
    failing = False
    while True:
        await asyncio.sleep(seconds)
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except quiet as e:
            log.debug("periodic task %s failed: %s", name, e)
        except Exception:
            if not failing:
                log.exception("periodic task %s failed; will retry", name)
            failing = True
        else:
            if failing:
                log.info("periodic task %s recovered", name)
            failing = False
