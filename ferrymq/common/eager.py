"""Run a coroutine at once, on the caller's stack, and make a task of it only if it waits.

Most sends complete without waiting for anything (an append to the page cache, an answer):
creating a task for each costs a task object, a pass of the event loop (a select call with
one request in flight) and a wake-up. ``start_eagerly`` runs the coroutine until it first
suspends; only then does a task take it over, awaiting the very future it suspended on.
This is Python 3.12's eager task factory, for 3.11, applied where the caller chooses.

The part that runs before the first suspension is not inside a task: it must not use
``asyncio.current_task()`` or ``asyncio.timeout()`` (which needs the current task) before
its first ``await`` of something that really waits. Callers therefore opt in per coroutine
kind (the remoting server per request code), never for every coroutine.

Parking: a caller that runs several coroutines eagerly in one go (the remoting connection,
for the requests of one read) may let them *park*: a coroutine that awaits ``Parked()``
yields the ``PARK`` marker to the caller, which keeps it in ``parked`` and later continues it
with a ``Resumption`` (no task, no loop pass), after doing what they parked for at once
(the broker writes the sends of one read with one write per file). Only code that knows it
runs under such a caller may await ``Parked()`` (the store parks only while a connection's
dispatch round is open); a task that meets the marker fails with "bad yield".

Waiting together: parked coroutines resumed one after another with a ``Resumption`` that then
wait on the same future (the sends of one round waiting for the one fsync that covers them
all) are finished by one task, which waits once and continues each in turn, instead of a task,
a wake-up and a callback each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["PARK", "Parked", "Resumption", "start_eagerly"]


class _ParkMarker:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PARK"


PARK = _ParkMarker()


class Parked:
    """Awaiting this parks the coroutine with the caller that runs it eagerly (see above);
    it continues when a ``Resumption`` resumes it, receiving ``result`` (or raising ``error``) set meanwhile."""

    __slots__ = ("result", "error")

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

    def __await__(self) -> Generator[Any, Any, Any]:
        yield PARK
        if self.error is not None:
            raise self.error
        return self.result


class _Resume:
    """An awaitable that continues a suspended coroutine, starting with what it yielded."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._pending
        self._pending = None
        while True:
            try:
                sent = yield value  # the task waits on this future, as if coro had yielded it to it
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and errors go to where coro waits
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(resume: _Resume) -> Any:
    return await resume


class _Done:
    """Awaiting this waits until ``future`` is done, without taking its result or exception
    (they are for the coroutines that await it)."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, Any, None]:
        future = self._future
        if not future.done():
            future._asyncio_future_blocking = True  # what Future.__await__ sets before it yields
            yield future


async def _finish_together(future: asyncio.Future, coros: list[Coroutine[Any, Any, Any]],
                           before: Callable[[], None] | None) -> None:
    """Wait for ``future`` once, then (after calling ``before``) continue every coroutine
    suspended on it, in order.

    Those that wait again after that (a SYNC_FLUSH send's replication wait, a full socket) are
    finished as ``Resumption`` finishes them (together when they wait on one future), awaited
    here. A cancellation of this task goes to every coroutine, as a task's would; the first
    exception a coroutine raises is raised here after the others have run."""
    thrown: BaseException | None = None
    try:
        await _Done(future)
    except BaseException as exc:
        thrown = exc
    again = Resumption(before)
    failure: BaseException | None = None
    if before is not None:
        before()
    for coro in coros:
        try:
            again.waiting(coro, coro.send(None) if thrown is None else coro.throw(thrown))
        except StopIteration:
            continue
        except BaseException as exc:
            failure = failure or exc
    for task in again.start():
        try:
            await task
        except BaseException as exc:
            failure = failure or exc
    if thrown is not None:
        raise thrown
    if failure is not None:
        raise failure


class Resumption:
    """Resumes parked coroutines (``resume`` each, then ``start``): those that then wait on the
    same future are finished together by one task; each of the others by a task of its own.
    ``before_together`` is called each time such a task is about to continue its coroutines
    (the connection then lets their answers leave in one write)."""

    __slots__ = ("_waiting", "_before")

    def __init__(self, before_together: Callable[[], None] | None = None) -> None:
        self._waiting: dict[int, tuple[Any, list[Coroutine[Any, Any, Any]]]] = {}
        self._before = before_together

    def resume(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Continue ``coro`` now; what it raises before it waits propagates, as from a call."""
        try:
            pending = coro.send(None)
        except StopIteration:
            return
        self.waiting(coro, pending)

    def waiting(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        """``coro``, continued elsewhere, now waits on ``pending`` (what it yielded)."""
        if pending is PARK:
            coro.close()
            raise RuntimeError("a coroutine parked where no caller takes parked coroutines")
        if getattr(pending, "_asyncio_future_blocking", False):
            # Taken as a task takes it: the next coroutine may await the same future only then.
            pending._asyncio_future_blocking = False
        waiting = self._waiting.get(id(pending))
        if waiting is None:
            self._waiting[id(pending)] = (pending, [coro])  # holds pending: its id stays its own
        else:
            waiting[1].append(coro)

    def start(self) -> list[asyncio.Task]:
        """The tasks that finish what the resumed coroutines wait for."""
        loop = asyncio.get_running_loop()
        tasks = []
        for pending, coros in self._waiting.values():
            if len(coros) > 1 and isinstance(pending, asyncio.Future):
                tasks.append(loop.create_task(_finish_together(pending, coros, self._before)))
            else:  # (a bare yield, as asyncio.sleep(0)'s, reschedules each on its own)
                if isinstance(pending, asyncio.Future):
                    pending._asyncio_future_blocking = True  # as the coroutine yielded it
                tasks.extend(loop.create_task(_finish(_Resume(coro, pending))) for coro in coros)
        self._waiting = {}
        return tasks


def start_eagerly(coro: Coroutine[Any, Any, Any], name: str | None = None,
                  parked: list[Coroutine[Any, Any, Any]] | None = None) -> asyncio.Task | None:
    """Run ``coro`` now; None if it finished without suspending (or parked: then it is
    appended to ``parked``), else the task finishing it.

    An exception raised before the first suspension propagates to the caller, as it would
    from a plain call."""
    try:
        pending = coro.send(None)
    except StopIteration:
        return None
    return _after_suspension(coro, pending, name, parked)


def _after_suspension(coro: Coroutine[Any, Any, Any], pending: Any, name: str | None,
                      parked: list[Coroutine[Any, Any, Any]] | None) -> asyncio.Task | None:
    if pending is PARK:
        if parked is None:
            coro.close()
            raise RuntimeError("a coroutine parked where no caller takes parked coroutines")
        parked.append(coro)
        return None
    return asyncio.get_running_loop().create_task(_finish(_Resume(coro, pending)), name=name)
