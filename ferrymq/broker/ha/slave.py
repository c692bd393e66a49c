"""The slave's side of replication (RocketMQ 4.x HAClient).

Connects to the master's HA address (haMasterAddress, or what the name server's
REGISTER_BROKER answer says), reports its CommitLog max offset (where to start), then
reads transfers: each must start exactly where the slave's data ends, or the connection is
dropped and started again from the CommitLog's end. The bytes are written and dispatched by
the store (store/replica.py); transfers that arrived together are written as one, and the new
offset is reported after each write and every haSendHeartbeatInterval. Nothing read for
haHousekeepingInterval closes the connection. A lost connection is retried after a short pause
(doubling up to 5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ferrymq.broker.ha.frames import (
    GOODBYE,
    TRANSFER_HEADER,
    HAFrameError,
    decode_transfer_header,
    encode_offset_report,
    read_more,
)
from ferrymq.common.tasks import IdleLimit, within
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.replica import ReplicaAppender, ReplicaDataError

log = logging.getLogger(__name__)

MAX_TRANSFER_BODY = 4 * 1024 * 1024  # the Java slave's read buffer: no master sends more at once
_RETRY_MIN_S, _RETRY_MAX_S = 0.2, 5.0
_CONNECT_TIMEOUT_S = 5.0
_READ_SIZE = 1024 * 1024  # what one read takes from the socket's buffer at most
# What ends a session and is retried: the network, the master's frames, data that does not continue the log.
_SESSION_ERRORS = (OSError, HAFrameError, ReplicaDataError, TimeoutError)


@dataclass(frozen=True)
class HASlaveSettings:
    heartbeat_interval_ms: int
    housekeeping_interval_ms: int


class HASlave:
    def __init__(self, store: AsyncMessageStore, appender: ReplicaAppender, settings: HASlaveSettings,
                 master_address: str | None = None, hello: Callable[[], bytes] | None = None) -> None:
        """``hello``: controller mode, the frame that names this slave to the master (frames.encode_hello),
        made afresh for each connection (the epoch may have moved)."""
        self.store = store
        self._hello = hello
        self.appender = appender
        self.settings = settings
        self.master_address = master_address or None
        self._address_changed = asyncio.Event()
        self.connected = False
        self._writer: asyncio.StreamWriter | None = None  # the connection to the master, while there is one
        self.confirmed_offset = 0  # the CommitLog's end as last reported to the master
        self.master_offset = 0  # the master's offset as its last transfer showed it

    def update_master_address(self, address: str | None) -> None:
        """A new HA address for the master (the name server's answer); reconnects if it changed."""
        if address and address != self.master_address:
            log.info("master HA address is now %s", address)
            self.master_address = address
            self._address_changed.set()

    async def run(self) -> None:
        """Replicate until cancelled; a new master address ends the current connection."""
        retry, failing = _RETRY_MIN_S, False
        while True:
            self._address_changed.clear()
            address = self.master_address
            if not address:
                await self._address_changed.wait()
                continue
            started = time.monotonic()
            session = asyncio.ensure_future(self._session(address))
            changed = asyncio.ensure_future(self._address_changed.wait())
            try:
                await asyncio.wait((session, changed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                if not session.done():  # the master moved (or we are being stopped)
                    session.cancel()
                await asyncio.gather(session, changed, return_exceptions=True)
                self.connected = False
            error = None if session.cancelled() else session.exception()
            if error is not None and not isinstance(error, _SESSION_ERRORS):
                raise error
            if error is not None:
                # Once per streak of failures (a master down for minutes is one line, not hundreds).
                log.log(logging.DEBUG if failing else logging.WARNING, "replication from %s stopped: %s", address,
                        error or type(error).__name__)
                failing = True
            if time.monotonic() - started > 10:
                retry, failing = _RETRY_MIN_S, False  # it ran a while: a fresh failure, not a flapping one
            if self._address_changed.is_set():
                continue
            try:
                await within(self._address_changed.wait(), retry)
            except asyncio.TimeoutError:
                pass
            retry = min(retry * 2, _RETRY_MAX_S)

    async def _session(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise OSError(f"bad master HA address {address!r} (host:port expected)")
        reader, writer = await within(asyncio.open_connection(host, int(port)), _CONNECT_TIMEOUT_S)
        reporter = None
        try:
            start = await self.store.reset_replica(self.appender)
            self.connected = True
            log.info("replicating from master %s, starting at CommitLog offset %d", address, start)
            if self._hello is not None:
                writer.write(self._hello())
            self._report(writer, start)
            await writer.drain()
            self._writer = writer
            reporter = asyncio.create_task(self._report_periodically(writer))
            await self._receive(reader, writer, address)
        finally:
            self._writer = None
            if reporter is not None:
                reporter.cancel()
                await asyncio.gather(reporter, return_exceptions=True)
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def say_goodbye(self) -> None:
        """Controller mode, a graceful shutdown: tell the master this slave is leaving, so that it
        stops waiting for it (frames.GOODBYE). Nothing when not connected or not named by a hello."""
        writer = self._writer
        if writer is None or self._hello is None:
            return
        with contextlib.suppress(OSError, TimeoutError):
            writer.write(GOODBYE)
            await within(writer.drain(), 1.0)

    def _report(self, writer: asyncio.StreamWriter, offset: int) -> None:
        writer.write(encode_offset_report(offset))
        self.confirmed_offset = offset

    async def _report_periodically(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)
            self._report(writer, self.store.max_phy_offset)
            await writer.drain()

    async def _receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str) -> None:
        """Reads what the socket has and applies its transfers: contiguous ones (a master that
        wrote several while this slave was busy) as one append and one report."""
        housekeeping = self.settings.housekeeping_interval_ms / 1000
        appender, store = self.appender, self.store
        unread = bytearray()  # received, not yet a whole frame
        silent = f"nothing from the master for {housekeeping:g} s (haHousekeepingInterval)"
        async with IdleLimit(housekeeping, silent) as idle:
            while True:
                await read_more(reader, unread, _READ_SIZE, idle, "master")
                pos, end = 0, len(unread)
                chunk_at, chunk = -1, bytearray()  # contiguous transfer bodies of this read
                while end - pos >= TRANSFER_HEADER.size:
                    header = decode_transfer_header(unread[pos:pos + TRANSFER_HEADER.size], MAX_TRANSFER_BODY)
                    body_at = pos + TRANSFER_HEADER.size
                    if end - body_at < header.size:
                        break
                    pos = body_at + header.size
                    self.master_offset = header.offset + header.size
                    if chunk and (header.heartbeat or header.offset != chunk_at + len(chunk)):
                        await self._apply(writer, chunk_at, chunk)
                        chunk_at, chunk = -1, bytearray()
                    if header.heartbeat:
                        if header.offset != appender.expected_offset and store.max_phy_offset != 0:
                            raise ReplicaDataError(f"master is at offset {header.offset}, this slave at "
                                                   f"{appender.expected_offset}")
                        continue
                    if not chunk:
                        chunk_at = header.offset
                    chunk += unread[body_at:pos]
                del unread[:pos]
                if chunk:
                    await self._apply(writer, chunk_at, chunk)

    async def _apply(self, writer: asyncio.StreamWriter, offset: int, data: bytearray) -> None:
        confirmed = await self.store.append_replica(self.appender, offset, data)
        if confirmed > self.confirmed_offset:
            self._report(writer, confirmed)
            await writer.drain()
