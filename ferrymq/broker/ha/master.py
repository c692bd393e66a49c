"""The master's side of replication (RocketMQ 4.x HAService, AcceptSocketService, HAConnection).

Listens on haListenPort; each slave connection runs two tasks: one reads the slave's offset
reports (the first says where to start; each later one acknowledges what the slave has),
one streams CommitLog bytes from there in chunks of at most haTransferBatchSize, sending a
heartbeat (size 0) when nothing was sent for haSendHeartbeatInterval. A slave silent for
haHousekeepingInterval is dropped. New data wakes the streams (a store arrival listener),
no polling.

SYNC_MASTER: a put waits (``replication_wait``) until some slave acknowledged an offset at
or past its end, at most syncFlushTimeout (then FLUSH_SLAVE_TIMEOUT); with no slave
connected within haSlaveFallbehindMax it is answered SLAVE_NOT_AVAILABLE at once. The
message is stored either way.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ferrymq.broker.async_store import AsyncMessageStore
from ferrymq.broker.ha.frames import OFFSET_REPORT, HAFrameError, decode_offset_report, encode_transfer
from ferrymq.common.tasks import TaskSet
from ferrymq.store.results import AppendResult, PutStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HAMasterSettings:
    host: str
    port: int  # 0: any free port
    transfer_batch_size: int
    heartbeat_interval_ms: int
    housekeeping_interval_ms: int
    slave_fallbehind_max: int
    commit_log_file_size: int


@dataclass
class SlaveState:
    """One connected slave as metrics and status show it."""

    address: str
    acked_offset: int = -1  # -1 until its first report
    next_transfer_offset: int = -1


class HAMaster:
    def __init__(self, store: AsyncMessageStore, settings: HAMasterSettings, sync_timeout_ms: Callable[[], int]) -> None:
        """``sync_timeout_ms``: a callable giving syncFlushTimeout now (it may change live)."""
        self.store = store
        self.settings = settings
        self._sync_timeout_ms = sync_timeout_ms
        self._server: asyncio.AbstractServer | None = None
        self._tasks = TaskSet("HA master", log)
        self._connections: dict[int, tuple[SlaveState, asyncio.Event]] = {}
        self._ids = itertools.count()
        self.acked_offset = 0  # the highest offset any slave acknowledged (push2SlaveMaxOffset)
        self.acknowledged_end = 0  # SYNC_MASTER: end of the last put answered PUT_OK (a successor must hold it)
        self._waiters: list[tuple[int, int, asyncio.Future]] = []  # heap of (end offset, seq, future)
        self._seq = itertools.count()
        self.port = settings.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, any_port_if_taken: bool = False) -> None:
        """Listen; ``any_port_if_taken``: the port was only derived (listenPort + 1), so when it
        is taken take any free one (slaves learn it from the name server's answer)."""
        try:
            self._server = await asyncio.start_server(self._serve, self.settings.host, self.settings.port)
        except OSError as exc:
            if not any_port_if_taken:
                raise
            log.warning("HA port %d unavailable (%s): listening on a free port; slaves find it through the name "
                        "server (haServerAddr), not by haMasterAddress=host:listenPort+1", self.settings.port, exc)
            self._server = await asyncio.start_server(self._serve, self.settings.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.arrival_listeners.append(self._on_arrival)
        log.info("HA service listening on %s:%d", self.settings.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._tasks.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for _, _, future in self._waiters:
            if not future.done():
                future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()

    @property
    def slaves(self) -> list[SlaveState]:
        return [state for state, _ in self._connections.values()]

    # ------------------------------------------------------------------ SYNC_MASTER

    def slave_ok(self, end_offset: int) -> bool:
        """A slave is connected and the last acknowledgement is within haSlaveFallbehindMax."""
        return bool(self._connections) and end_offset - self.acked_offset < self.settings.slave_fallbehind_max

    def replication_wait(self, result: AppendResult) -> asyncio.Future[PutStatus]:
        """A future of PUT_OK once a slave has the put, FLUSH_SLAVE_TIMEOUT after
        syncFlushTimeout, or SLAVE_NOT_AVAILABLE at once."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        end = result.wrote_offset + result.wrote_bytes
        if not self.slave_ok(end):
            future.set_result(PutStatus.SLAVE_NOT_AVAILABLE)
        elif self.acked_offset >= end:
            future.set_result(PutStatus.PUT_OK)
            self.acknowledged_end = max(self.acknowledged_end, end)
        else:
            heapq.heappush(self._waiters, (end, next(self._seq), future))
            timer = loop.call_later(max(0, self._sync_timeout_ms()) / 1000, _settle, future,
                                    PutStatus.FLUSH_SLAVE_TIMEOUT)
            future.add_done_callback(lambda _: timer.cancel())
        return future

    def _acknowledged(self, offset: int) -> None:
        if offset <= self.acked_offset:
            return
        self.acked_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            end, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(PutStatus.PUT_OK)
                self.acknowledged_end = max(self.acknowledged_end, end)
        while waiters and waiters[0][2].done():  # timed out: drop them from the front
            heapq.heappop(waiters)

    # ------------------------------------------------------------------ connections

    def _on_arrival(self, *_args) -> None:
        for _, wake in self._connections.values():
            wake.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        state = SlaveState(f"{peer[0]}:{peer[1]}" if peer else "?")
        self._tasks.spawn(self._run_connection(reader, writer, state), f"ha-slave-{state.address}")

    async def _run_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                              state: SlaveState) -> None:
        wake = asyncio.Event()
        key = next(self._ids)
        self._connections[key] = (state, wake)
        log.info("slave %s connected", state.address)
        first_report = asyncio.get_running_loop().create_future()
        reading = asyncio.create_task(self._read_reports(reader, state, first_report))
        sending = asyncio.create_task(self._send(writer, state, wake, first_report))
        try:
            done, _ = await asyncio.wait((reading, sending), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if isinstance(error, (OSError, asyncio.IncompleteReadError, HAFrameError, TimeoutError)):
                    log.info("slave %s disconnected: %s", state.address, error or "connection closed")
                elif error is not None:
                    log.error("slave %s: replication failed", state.address, exc_info=error)
        finally:
            self._connections.pop(key, None)
            if not self._connections:  # waits that timed out are dropped here, not only by later acks
                self._waiters = [w for w in self._waiters if not w[2].done()]
                heapq.heapify(self._waiters)
            for task in (reading, sending):
                task.cancel()
            await asyncio.gather(reading, sending, return_exceptions=True)
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    async def _read_reports(self, reader: asyncio.StreamReader, state: SlaveState,
                            first_report: asyncio.Future) -> None:
        housekeeping = self.settings.housekeeping_interval_ms / 1000
        while True:
            try:
                data = await asyncio.wait_for(reader.readexactly(OFFSET_REPORT.size), housekeeping)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no offset report for {housekeeping:g} s (haHousekeepingInterval)") from None
            offset = decode_offset_report(data)
            if not first_report.done():
                first_report.set_result(offset)
            state.acked_offset = offset
            self._acknowledged(offset)

    async def _send(self, writer: asyncio.StreamWriter, state: SlaveState, wake: asyncio.Event,
                    first_report: asyncio.Future) -> None:
        requested = await first_report
        store, settings = self.store, self.settings
        if requested == 0:  # a new slave starts at the master's last CommitLog file
            head = store.max_phy_offset
            requested = head - head % settings.commit_log_file_size
        if requested > store.max_phy_offset:
            log.warning("slave %s asks for offset %d, beyond this master's CommitLog end %d: it gets data once "
                        "the master's log reaches it (was the master's store replaced?)", state.address, requested,
                        store.max_phy_offset)
        state.next_transfer_offset = offset = requested
        log.info("slave %s: transferring the CommitLog from offset %d", state.address, offset)
        heartbeat = settings.heartbeat_interval_ms / 1000
        last_write = time.monotonic()
        warned = False
        while True:
            wake.clear()  # before reading: data stored after this read sets it again
            data = await store.transfer_data(offset, settings.transfer_batch_size)
            if not data and offset < store.min_phy_offset and not warned:
                warned = True
                log.warning("slave %s needs offset %d, which retention deleted (the CommitLog starts at %d): it "
                            "cannot catch up from this master", state.address, offset, store.min_phy_offset)
            if data:
                writer.write(encode_transfer(offset, data))
                await writer.drain()
                offset += len(data)
                state.next_transfer_offset = offset
                last_write = time.monotonic()
                continue
            idle = time.monotonic() - last_write
            if idle >= heartbeat:
                writer.write(encode_transfer(offset))
                await writer.drain()
                last_write = time.monotonic()
                continue
            try:
                await asyncio.wait_for(wake.wait(), heartbeat - idle)
            except asyncio.TimeoutError:
                pass


def _settle(future: asyncio.Future, status: PutStatus) -> None:
    if not future.done():
        future.set_result(status)
