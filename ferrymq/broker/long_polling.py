"""Held pulls: a pull that found nothing waits here until a message arrives for its queue.

No timer loop: each waiter is a future keyed by (topic, queue id); an arrival resolves the
futures whose requested offset is now below the queue's max offset. The pull processor
re-runs its read when woken, and answers PULL_NOT_FOUND when its suspend time ends.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class PullWaiters:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = defaultdict(list)
        self.closed = False  # the broker is stopping: nothing is held any more

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Wait until the queue's max offset exceeds ``offset``; False on timeout or shutdown."""
        if timeout <= 0 or self.closed:
            return False
        fut = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        entry = (offset, fut)
        self._waiters[key].append(entry)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that arrives just as the future completes, and shutdown would then hang.
            async with asyncio.timeout(timeout):
                await fut
            return not self.closed
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    del self._waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        for offset, fut in self._waiters.get((topic, queue_id), ()):
            if offset < max_offset and not fut.done():
                fut.set_result(None)

    def close(self) -> None:
        """Shutdown: answer every held pull now, and hold none from here on."""
        self.closed = True
        for waiters in self._waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)
