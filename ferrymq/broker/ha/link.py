"""One HA connection (master or slave side) as an asyncio protocol.

What the peer sends goes to its owner's ``received`` in ``data_received`` itself: the owner cuts
its frames out of the bytes read so far and acts on them in the loop pass that read them, with
no stream reader and no task wake-up between the socket and the store. Replication's round
trip (a SYNC_MASTER send waits for the slave's report) crosses each side's loop once.

Writes go straight to the transport; ``drain`` waits only while the socket's buffer is over its
limit. ``ended`` fails with what ended the connection: the peer closing it, or whatever the
owner's ``received`` raised (a frame no peer sends, data that does not continue the log).
"""

from __future__ import annotations

import asyncio
from typing import Callable

# received(unread): takes the whole frames from the start of ``unread`` (deleting them) and acts
# on them; what it leaves is the start of a frame whose rest has not arrived.
Received = Callable[[bytearray], None]


def _nothing() -> None:
    pass


class HALink(asyncio.Protocol):
    def __init__(self, received: Received, peer: str, connected: Callable[["HALink"], None] | None = None) -> None:
        """``peer``: "master" or "slave", for the error when it closes the connection;
        ``connected``: called once the connection is made (the transport is there)."""
        self._received = received
        self._peer = peer
        self._connected = connected
        self.touched: Callable[[], None] = _nothing  # called on every read (an idle limit's clock)
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._unread = bytearray()  # read, not yet a whole frame (or held back: ``hold``)
        self._held = True  # received is not called until ``release``
        self._drained: asyncio.Future[None] | None = None  # while the socket's buffer is over its limit

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._connected is not None:
            self._connected(self)

    def data_received(self, data: bytes) -> None:
        self.touched()
        self._unread += data
        if not self._held:
            self._deliver()

    def eof_received(self) -> bool:
        self.end(ConnectionResetError(f"the {self._peer} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.end(exc or ConnectionResetError(f"the {self._peer} closed the connection"))
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # ---------------------------------------------------------------- for the owner

    def hold(self) -> None:
        """Stop reading and delivering (the owner is busy with what it has: a write in a thread)."""
        self._held = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def release(self) -> None:
        """Deliver what was read meanwhile, and read on."""
        self._held = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        if self._unread:
            self._deliver()

    def write(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    @property
    def backlog(self) -> int:
        """Bytes written and not yet taken by the socket."""
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    async def drain(self) -> None:
        """Wait while the socket's buffer is over its limit (at once otherwise); the connection
        ending raises what ended it."""
        if self._drained is not None:
            await asyncio.shield(self._drained)
        if self.ended.done():
            self.ended.result()

    def end(self, exc: BaseException) -> None:
        """End the connection with ``exc`` (what ``ended`` then fails with)."""
        if not self.ended.done():
            self.ended.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close it (what was written still goes out first); ``ended`` is settled either way."""
        if self.transport is not None:
            self.transport.close()
        if self.ended.done():
            if not self.ended.cancelled():
                self.ended.exception()  # retrieved: the owner saw it, or is being cancelled
        else:
            self.ended.cancel()

    def _deliver(self) -> None:
        try:
            self._received(self._unread)
        except Exception as exc:  # noqa: BLE001 - ends the connection; the owner decides from ``ended``
            self.end(exc)
