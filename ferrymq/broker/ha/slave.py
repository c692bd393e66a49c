"""The slave's side of replication (RocketMQ 4.x HAClient).

Connects to the master's HA address (haMasterAddress, or what the name server's
REGISTER_BROKER answer says), reports its CommitLog max offset (where to start), then
reads transfers: each must start exactly where the slave's data ends, or the connection is
dropped and started again from the CommitLog's end. The bytes are written and dispatched by
the store (store/replica.py); transfers that arrived together are written as one, and the new
offset is reported after each write and every haSendHeartbeatInterval. Nothing read for
haHousekeepingInterval closes the connection. A lost connection is retried after a short pause
(doubling up to 5 s).

Transfers are cut and written as they are read (ha/link.py): a slave keeping up writes a
transfer and reports its new offset in the loop pass that read it (a SYNC_MASTER's send waits
for that report).
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
)
from ferrymq.broker.ha.link import HALink
from ferrymq.common.tasks import IdleLimit, within
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.replica import ReplicaAppender, ReplicaDataError

log = logging.getLogger(__name__)

MAX_TRANSFER_BODY = 4 * 1024 * 1024  # the Java slave's read buffer: no master sends more at once
_RETRY_MIN_S, _RETRY_MAX_S = 0.2, 5.0
_CONNECT_TIMEOUT_S = 5.0
# What ends a session and is retried: the network, the master's frames, data that does not continue the log.
_SESSION_ERRORS = (OSError, HAFrameError, ReplicaDataError, TimeoutError)


@dataclass
class ReplicaPosition:
    """Where a slave stands: what it last reported and what the master's transfers showed."""

    confirmed_offset: int = 0  # the CommitLog's end as last reported to the master
    master_offset: int = 0  # the master's offset as its last transfer showed it


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
        self._link: HALink | None = None  # the connection to the master, while there is one
        self.position = ReplicaPosition()

    @property
    def confirmed_offset(self) -> int:
        return self.position.confirmed_offset

    @property
    def master_offset(self) -> int:
        return self.position.master_offset

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
        housekeeping = self.settings.housekeeping_interval_ms / 1000
        transfers = _TransferWriter(self.store, self.appender, self.position)
        async with IdleLimit(housekeeping, f"nothing from the master for {housekeeping:g} s "
                                           "(haHousekeepingInterval)") as idle:
            loop = asyncio.get_running_loop()
            _, link = await within(loop.create_connection(lambda: HALink(transfers.received, "master"), host, int(port)),
                                   _CONNECT_TIMEOUT_S)
            link.touched = idle.touch
            transfers.link = link
            reporter = None
            try:
                start = await self.store.reset_replica(self.appender)
                self.connected = True
                log.info("replicating from master %s, starting at CommitLog offset %d", address, start)
                if self._hello is not None:
                    link.write(self._hello())
                transfers.report(start)
                link.release()  # transfers come from here on
                self._link = link
                reporter = asyncio.create_task(self._report_periodically(transfers))
                await link.ended
            finally:
                self._link = None
                if reporter is not None:
                    reporter.cancel()
                    await asyncio.gather(reporter, return_exceptions=True)
                await transfers.close()

    async def say_goodbye(self) -> None:
        """Controller mode, a graceful shutdown: tell the master this slave is leaving, so that it
        stops waiting for it (frames.GOODBYE). Nothing when not connected or not named by a hello."""
        link = self._link
        if link is None or self._hello is None:
            return
        link.write(GOODBYE)
        with contextlib.suppress(OSError, TimeoutError):
            await within(link.drain(), 1.0)

    async def _report_periodically(self, transfers: "_TransferWriter") -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)
            transfers.report(self.store.max_phy_offset)


class _TransferWriter:
    """One connection's transfers: cut from what the master sent, written to the store and
    reported, as they arrive (HALink calls ``received`` in the loop pass that read them).

    Contiguous transfers read together are written as one append with one report. A transfer the
    writer thread must write (a slave catching up: megabytes at a time) holds the connection's
    reading until it is written; what was read meanwhile waits for it."""

    def __init__(self, store: AsyncMessageStore, appender: ReplicaAppender, position: ReplicaPosition) -> None:
        self._store = store
        self._appender = appender
        self._position = position
        self.link: HALink | None = None
        self._writing: asyncio.Task | None = None  # transfers in the writer thread

    def report(self, offset: int) -> None:
        self.link.write(encode_offset_report(offset))
        self._position.confirmed_offset = offset

    async def close(self) -> None:
        if self._writing is not None:
            self._writing.cancel()
            await asyncio.gather(self._writing, return_exceptions=True)
        if self.link is not None:
            self.link.close()

    def received(self, unread: bytearray) -> None:
        runs = self._cut(unread)
        for i, (offset, data) in enumerate(runs):
            confirmed = self._store.append_replica_now(self._appender, offset, data)
            if confirmed is None:
                self.link.hold()
                self._writing = asyncio.create_task(self._write_in_thread(runs[i:]))
                return
            self._confirmed(confirmed)

    async def _write_in_thread(self, runs: list[tuple[int, bytearray]]) -> None:
        try:
            for offset, data in runs:
                self._confirmed(await self._store.append_replica(self._appender, offset, data))
        except Exception as exc:  # noqa: BLE001 - ends the connection, as a failed write in received does
            self.link.end(exc)
            return
        finally:
            self._writing = None
        self.link.release()

    def _confirmed(self, offset: int) -> None:
        if offset > self._position.confirmed_offset:
            self.report(offset)

    def _cut(self, unread: bytearray) -> list[tuple[int, bytearray]]:
        """The whole transfers at the start of ``unread`` (taken out of it), contiguous ones joined:
        the (offset, bytes) runs to write, in order. Heartbeats are checked against where this
        slave's data will end."""
        position = self._position
        pos, end = 0, len(unread)
        runs: list[tuple[int, bytearray]] = []
        chunk_at, chunk = -1, bytearray()
        try:
            while end - pos >= TRANSFER_HEADER.size:
                header = decode_transfer_header(unread[pos:pos + TRANSFER_HEADER.size], MAX_TRANSFER_BODY)
                body_at = pos + TRANSFER_HEADER.size
                if end - body_at < header.size:
                    break
                pos = body_at + header.size
                position.master_offset = header.offset + header.size
                if chunk and (header.heartbeat or header.offset != chunk_at + len(chunk)):
                    runs.append((chunk_at, chunk))
                    chunk_at, chunk = -1, bytearray()
                if header.heartbeat:
                    expected = runs[-1][0] + len(runs[-1][1]) if runs else self._appender.expected_offset
                    if header.offset != expected and self._store.max_phy_offset != 0:
                        raise ReplicaDataError(f"master is at offset {header.offset}, this slave at {expected}")
                    continue
                if not chunk:
                    chunk_at = header.offset
                chunk += unread[body_at:pos]
        finally:
            del unread[:pos]
        if chunk:
            runs.append((chunk_at, chunk))
        return runs
