"""Requests waiting for their response, keyed by opaque, each with its own deadline."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from functools import partial
from typing import Callable

from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError, RemotingTimeoutError

# One counter for the whole process, as in Java: opaques then stay unique across all
# connections, which keeps logs from different peers unambiguous.
_opaque_counter = itertools.count()


def next_opaque() -> int:
    """The next opaque, wrapped into the signed 32-bit range the header carries."""
    value = next(_opaque_counter) & 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[RemotingCommand]
    timer: asyncio.TimerHandle
    code: int
    timeout: float


class ResponseTable:
    """Maps opaque -> waiting future.

    Deadlines use one loop timer per entry (loop.call_at), so an expired entry is failed
    and removed at its own deadline without any polling.
    """

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._entries: dict[int, _Pending] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, opaque: int, code: int, timeout: float) -> asyncio.Future[RemotingCommand]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        timer = loop.call_at(loop.time() + timeout, self._expire, opaque, future)
        self._entries[opaque] = _Pending(future, timer, code, timeout)
        # Covers the waiter giving up (cancellation); the other endings remove the
        # entry themselves before completing the future.
        future.add_done_callback(partial(self._forget, opaque))
        return future

    def complete(self, response: RemotingCommand) -> bool:
        """Hand a response to its waiter; False when nobody waits for that opaque."""
        entry = self._entries.pop(response.opaque, None)
        if entry is None:
            return False
        entry.timer.cancel()
        if not entry.future.done():
            entry.future.set_result(response)
        return True

    def fail_all(self, make_error: Callable[[], RemotingError]) -> None:
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(make_error())  # one instance each: tracebacks differ

    def _expire(self, opaque: int, future: asyncio.Future[RemotingCommand]) -> None:
        entry = self._entries.get(opaque)
        if entry is None or entry.future is not future:
            return
        del self._entries[opaque]
        if not future.done():
            future.set_exception(
                RemotingTimeoutError(
                    f"wait response on the channel <{self._peer}> timeout, "
                    f"{int(entry.timeout * 1000)}(ms), request code {entry.code}"
                )
            )

    def _forget(self, opaque: int, future: asyncio.Future[RemotingCommand]) -> None:
        entry = self._entries.get(opaque)
        if entry is not None and entry.future is future:
            del self._entries[opaque]
            entry.timer.cancel()
