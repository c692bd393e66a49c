"""An asyncio event loop on a daemon thread, for synchronous Spark code that drives FerryMQ's
asyncio clients.

Spark calls a data source from plain threads (planner processes on the driver, Python workers
on executors) and a user may call a helper from a notebook whose thread already runs an event
loop. So a client gets a loop of its own on a daemon thread and every call is handed over with
``run_coroutine_threadsafe``: it works whatever the calling thread is doing, and the client's
connections live as long as the loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from typing import Awaitable, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return self.submit(coro).result()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def pipelined(self, calls: Iterable[Callable[[], Awaitable[T]]], depth: int) -> Iterator[T]:
        """Results of each call, in order, with up to ``depth`` of them running at once on the
        loop: the network and the broker work while the caller handles the previous result."""
        pending: collections.deque[concurrent.futures.Future] = collections.deque()
        try:
            for call in calls:
                pending.append(self.submit(call()))
                if len(pending) >= depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:  # the caller stopped early (an error, or Spark cancelled the task)
                f.cancel()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
