"""A counting limit on in-flight requests with a non-blocking fast path.

asyncio.Semaphore can only be taken by awaiting, but invoke_async is a plain function
that should not pay for a task when a permit is free; hence this small variant with a
synchronous try_acquire.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Permits:
    __slots__ = ("_free", "_waiters")

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("permit count must be at least 1")
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def available(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        """Callers queued for a permit (cancelled ones may linger until the next release)."""
        return len(self._waiters)

    def try_acquire(self) -> bool:
        # release() hands permits straight to waiters, so a free permit implies nobody
        # is queued and taking it here cannot jump the queue.
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def acquire(self, timeout: float) -> bool:
        """Take a permit, waiting at most `timeout` seconds; False if none came."""
        if self.try_acquire():
            return True
        if timeout <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
            return True
        except TimeoutError:
            # The permit may have been handed over just as the timer fired.
            return waiter.done() and not waiter.cancelled()
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over, but our caller is gone: pass it on
            raise
        finally:
            if not waiter.done():
                waiter.cancel()
            if waiter.cancelled():
                # Not handed a permit, so possibly still queued (release() pops the
                # ones it serves); drop it now rather than let dead waiters pile up.
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
