"""The master's side of replication (RocketMQ 4.x HAService, AcceptSocketService, HAConnection).

Listens on haListenPort. A slave's offset reports (the first says where to start; each later
one acknowledges what the slave has) are read as they arrive (ha/link.py: a report releases the
sends waiting for it in the loop pass that read it); a task per slave streams CommitLog bytes
from there in chunks of at most haTransferBatchSize, sending a heartbeat (size 0) when nothing
was sent for haSendHeartbeatInterval. A slave silent for
haHousekeepingInterval is dropped. New data wakes the streams (a store arrival listener),
no polling. When nobody waits for the slaves (ASYNC_MASTER outside controller mode), a stream
that has caught up lingers haAsyncTransferLingerMills after new data comes, so a trickle of
sends costs one write to the slave, one append there and one acknowledgement per linger, not per
send. Transfers ready together leave in one write (up to WRITE_TRANSFERS).

SYNC_MASTER: a put waits (``replication_wait``) until some slave acknowledged an offset at
or past its end, at most syncFlushTimeout (then FLUSH_SLAVE_TIMEOUT); with no slave
connected within haSlaveFallbehindMax it is answered SLAVE_NOT_AVAILABLE at once. The
message is stored either way.

Controller mode (``track_in_sync``) replaces "some slave" by the in-sync set the controller
last committed (RocketMQ 5's SyncStateSet, Kafka's ISR): a put is acknowledged once every
member holds it, at once when the master is the only member. Slaves name themselves with a
hello frame (frames.encode_hello); only a member connected in the master's own epoch counts.
The master proposes changes to the set (``proposed_in_sync``: members gone or behind for
haMaxTimeSlaveNotCatchup out, caught-up slaves in); the failover agent has the controller
commit them by compare-and-swap before they apply here (``set_in_sync``), so a master cut off
from the controller can never shrink the set to itself and acknowledge alone.
``membership_listeners`` are called whenever what ``member_connected`` or ``waited_for`` say
may have changed (a slave named itself or went away, the set or the epoch changed): the
failover agent fences on that, without polling.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ferrymq.broker.ha.frames import (
    GOODBYE,
    HELLO,
    OFFSET_REPORT,
    HAFrameError,
    decode_hello_rest,
    decode_offset_report,
    encode_transfer,
    is_hello,
)
from ferrymq.broker.ha.link import HALink
from ferrymq.common.tasks import IdleLimit, TaskSet
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.results import AppendResult, PutStatus

log = logging.getLogger(__name__)

# Transfers (of at most haTransferBatchSize each) written at once when more than one is ready:
# 256 KiB with the default size, what a slave keeping up still writes on its loop.
WRITE_TRANSFERS = 8


@dataclass(frozen=True)
class HAMasterSettings:
    host: str
    port: int  # 0: any free port
    transfer_batch_size: int
    heartbeat_interval_ms: int
    housekeeping_interval_ms: int
    slave_fallbehind_max: int
    commit_log_file_size: int
    # A caught-up stream that nobody waits for (ASYNC_MASTER outside controller mode) sends new
    # data this long after it came, with the puts of that while (0: at once).
    async_linger_ms: int = 0


@dataclass
class SlaveState:
    """One connected slave as metrics and status show it."""

    address: str
    acked_offset: int = -1  # -1 until its first report
    next_transfer_offset: int = -1
    identity: int | None = None  # controller mode: the brokerId its hello named
    epoch: int = -1  # controller mode: the last epoch its hello named
    # A probe of how far behind the slave is: the CommitLog's end on the master at some moment;
    # once the slave acknowledges that much it held, then, everything the master had.
    probe: tuple[int, float] | None = None
    caught_up_at: float = 0.0  # monotonic time the slave last held everything the master had
    leaving: bool = False  # controller mode: it said goodbye (shutting down)

    def probe_from(self, end: int, now: float) -> None:
        if self.probe is None:
            self.probe = (end, now)

    def acknowledge(self, offset: int) -> None:
        self.acked_offset = offset
        if self.probe is not None and offset >= self.probe[0]:
            self.caught_up_at, self.probe = self.probe[1], None


class HAMaster:
    def __init__(self, store: AsyncMessageStore, settings: HAMasterSettings, sync_timeout_ms: Callable[[], int],
                 *, push_on_write: bool = False) -> None:
        """``sync_timeout_ms``: a callable giving syncFlushTimeout now (it may change live).
        ``push_on_write``: puts wait for the slaves (SYNC_MASTER), so new data is sent from the put
        itself; otherwise the put's answer goes first and the streams' tasks send it."""
        self.store = store
        self._push_on_write = push_on_write
        self.settings = settings
        self._sync_timeout_ms = sync_timeout_ms
        self._server: asyncio.AbstractServer | None = None
        self._tasks = TaskSet("HA master", log)
        self._connections: dict[int, _Stream] = {}
        self._ids = itertools.count()
        self.acked_offset = 0  # the highest offset any slave acknowledged (push2SlaveMaxOffset)
        self.acknowledged_end = 0  # SYNC_MASTER: end of the last put answered PUT_OK (a successor must hold it)
        self._waiters: list[tuple[int, int, asyncio.Future]] = []  # heap of (end offset, seq, future)
        self._seq = itertools.count()
        self._last_wait: tuple[int, asyncio.Future[PutStatus]] | None = None  # the latest of _waiters
        # When each wait times out: a heap of (loop time, seq, future) and one timer for the
        # earliest, rather than a timer per wait and a callback to cancel it when the wait ends.
        self._deadlines: list[tuple[float, int, asyncio.Future]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self.port = settings.port
        # Controller mode (track_in_sync): the committed in-sync set without the master, its
        # version, the master's epoch, and each member's best acknowledgement (kept across its
        # reconnections: a member that is away holds the acknowledgements back).
        self.in_sync: frozenset[int] | None = None
        self.in_sync_epoch = 0
        # While a grown set is being proposed, acknowledgements already wait for its new members
        # (stricter is safe; the master must not acknowledge alone what a new member lacks).
        self._expected: frozenset[int] | None = None
        self.epoch = 0
        self._member_acked: dict[int, int] = {}
        self._member_caught_up: dict[int, float] = {}  # when each slave last held everything, over its connections
        self.membership_listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, any_port_if_taken: bool = False) -> None:
        """Listen; ``any_port_if_taken``: the port was only derived (listenPort + 1), so when it
        is taken take any free one (slaves learn it from the name server's answer)."""
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._accept, self.settings.host, self.settings.port)
        except OSError as exc:
            if not any_port_if_taken:
                raise
            log.warning("HA port %d unavailable (%s): listening on a free port; slaves find it through the name "
                        "server (haServerAddr), not by haMasterAddress=host:listenPort+1", self.settings.port, exc)
            self._server = await loop.create_server(self._accept, self.settings.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.write_listeners.append(self._on_write)
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
        self._deadlines.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    @property
    def slaves(self) -> list[SlaveState]:
        return [stream.state for stream in self._connections.values()]

    # ------------------------------------------------------------------ SYNC_MASTER

    def slave_ok(self, end_offset: int) -> bool:
        """A slave is connected and the last acknowledgement is within haSlaveFallbehindMax."""
        return bool(self._connections) and end_offset - self.acked_offset < self.settings.slave_fallbehind_max

    def replication_wait(self, result: AppendResult) -> asyncio.Future[PutStatus]:
        """A future of PUT_OK once a slave (controller mode: every in-sync member) has the put,
        FLUSH_SLAVE_TIMEOUT after syncFlushTimeout, or SLAVE_NOT_AVAILABLE at once.

        Puts written together (a round's) wait for the group's end, all for the same one: they
        share one future and are answered together, as their SYNC_FLUSH waits are (the group
        is sent to the slaves in one transfer anyway)."""
        return self.held_up_to(max(result.wrote_offset + result.wrote_bytes, result.group_end))

    def held_up_to(self, end: int) -> asyncio.Future[PutStatus]:
        """``replication_wait`` for the CommitLog up to ``end`` (a master handing over waits
        until its in-sync slaves hold everything it stored)."""
        last = self._last_wait
        if last is not None and last[0] == end and not last[1].done():
            return last[1]  # waits for the same end share one future
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        if self.in_sync is not None and not self.waited_for:  # the master is the whole set
            future.set_result(PutStatus.PUT_OK)
            self.acknowledged_end = max(self.acknowledged_end, end)
        elif self.in_sync is None and not self.slave_ok(end):
            future.set_result(PutStatus.SLAVE_NOT_AVAILABLE)
        elif (self.acked_offset if self.in_sync is None else self.confirmed()) >= end:
            future.set_result(PutStatus.PUT_OK)
            self.acknowledged_end = max(self.acknowledged_end, end)
        else:
            seq = next(self._seq)
            heapq.heappush(self._waiters, (end, seq, future))
            self._last_wait = (end, future)
            self._time_out_at(loop, loop.time() + max(0, self._sync_timeout_ms()) / 1000, seq, future)
        return future

    def _time_out_at(self, loop: asyncio.AbstractEventLoop, deadline: float, seq: int, future: asyncio.Future) -> None:
        """``future`` settles FLUSH_SLAVE_TIMEOUT at ``deadline`` unless an acknowledgement came first."""
        heapq.heappush(self._deadlines, (deadline, seq, future))
        # One timer, armed at the earliest deadline there was when it was set: a later wait leaves it
        # as it is (it fires, times out what is due and arms for the next), an earlier one (the
        # first, or syncFlushTimeout lowered) moves it. Not a timer armed and cancelled per put.
        timer = self._deadline_timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._deadline_timer = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        """The deadline timer: time out the waits whose deadline passed, then wait for the next."""
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        now, deadlines = loop.time(), self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done()):
            _settle(heapq.heappop(deadlines)[2], PutStatus.FLUSH_SLAVE_TIMEOUT)
        if deadlines:
            self._deadline_timer = loop.call_at(deadlines[0][0], self._expire)

    def _acknowledged(self, offset: int) -> None:
        if offset <= self.acked_offset:
            return
        self.acked_offset = offset
        self._release(offset)

    def _release(self, offset: int) -> None:
        """Answer PUT_OK to the puts that end at or before ``offset``."""
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            end, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(PutStatus.PUT_OK)
                self.acknowledged_end = max(self.acknowledged_end, end)
        while waiters and waiters[0][2].done():  # timed out: drop them from the front
            heapq.heappop(waiters)
        deadlines = self._deadlines  # answered waits leave their deadlines too (most are at the front)
        while deadlines and deadlines[0][2].done():
            heapq.heappop(deadlines)

    # ------------------------------------------------------------------ the in-sync set (controller mode)

    def track_in_sync(self, epoch: int, members: frozenset[int], in_sync_epoch: int) -> None:
        """Acknowledge by the committed in-sync set from now on (the master's epoch ``epoch``)."""
        if epoch != self.epoch:
            self._member_acked.clear()
        self.epoch = epoch
        now = time.monotonic()  # members get a full haMaxTimeSlaveNotCatchup to (re)connect
        self._member_caught_up = {m: max(now, self._member_caught_up.get(m, 0.0)) for m in members}
        self.set_in_sync(members, in_sync_epoch)
        self._advance()
        self._membership_changed()  # the epoch may have changed which connections count

    def step_down(self) -> None:
        """No longer the group's master (it follows another now): forget the in-sync set and let
        consumers read everything this store holds (a truncation already cut what the group
        does not share)."""
        self.in_sync, self._expected = None, None
        self._member_acked.clear()
        self.store.set_visible_limit(None)
        self._membership_changed()

    def set_in_sync(self, members: frozenset[int], in_sync_epoch: int) -> None:
        """The set the controller committed (version ``in_sync_epoch``); waits it now covers are answered."""
        if self.in_sync == members and self.in_sync_epoch == in_sync_epoch:
            return
        self.in_sync, self.in_sync_epoch = frozenset(members), in_sync_epoch
        self._expected = None
        self._adopt_acks()
        self._advance()
        self._membership_changed()

    def expect(self, members: frozenset[int] | None) -> None:
        """Wait for ``members`` too from now on, until the controller answers a proposal
        (``None``: back to the committed set)."""
        self._expected = members
        self._adopt_acks()
        self._advance()
        self._membership_changed()

    def _adopt_acks(self) -> None:
        """A new member's acknowledgements so far count at once."""
        for state in self.slaves:
            if self._counts(state) and state.acked_offset > self._member_acked.get(state.identity, -1):
                self._member_acked[state.identity] = state.acked_offset

    @property
    def waited_for(self) -> frozenset[int]:
        """The members acknowledgements wait for: the committed set and any being proposed (the
        controller may have committed a proposal whose answer never arrived)."""
        return (self.in_sync or frozenset()) | (self._expected or frozenset())

    def confirmed(self) -> int:
        """Controller mode: the offset every member waited for holds (the store's end with none)."""
        members = self.waited_for
        if not members:
            return self.store.max_phy_offset
        return min(self._member_acked.get(m, 0) for m in members)

    def _membership_changed(self) -> None:
        for listener in self.membership_listeners:
            listener()

    def _counts(self, state: SlaveState) -> bool:
        """A connection whose acknowledgements count for the in-sync set: named, and in this epoch."""
        return state.identity is not None and state.epoch == self.epoch and self.in_sync is not None

    def member_connected(self) -> bool:
        """Some member of the in-sync set (or of a proposed one) is connected in this epoch."""
        members = self.waited_for
        return any(s.identity in members and self._counts(s) for s in self.slaves)

    def proposed_in_sync(self, now: float, max_not_catchup_s: float) -> frozenset[int]:
        """The set this master would have: the members and the slaves connected in this epoch
        that held everything the master had within the last ``max_not_catchup_s``
        (haMaxTimeSlaveNotCatchup), connected now or not (a member away keeps its place that
        long, so a restart of either side does not shrink the set at once)."""
        staying = [s for s in self.slaves if self._counts(s) and not s.leaving]
        for s in staying:
            self._member_caught_up[s.identity] = max(s.caught_up_at, self._member_caught_up.get(s.identity, 0.0))
        current = self.in_sync or frozenset()
        connected = {s.identity for s in staying}
        return frozenset(m for m, at in self._member_caught_up.items()
                         if now - at <= max_not_catchup_s and (m in current or m in connected))

    # ------------------------------------------------------------------ connections

    def _on_write(self, _end: int) -> None:
        """New data. With ``push_on_write`` a stream parked for it sends it from here, at once (a
        SYNC_MASTER put's round trip then has no task hop before the transfer); once per loop pass,
        so the puts of a busy pass still go out together, by the stream's task."""
        push = self._push_on_write
        for stream in self._connections.values():
            if not (push and stream.parked and not stream.just_pushed and self._push(stream)):
                stream.wake.set()

    def _push(self, stream: "_Stream") -> bool:
        """Send what the CommitLog has past the stream's offset, if it was written lately (read on the
        loop) and fits WRITE_TRANSFERS transfers, and the socket takes it at once; False: left to the task."""
        link = stream.link
        if link.closing or link.backlog:
            return False
        store = self.store
        data = store.recent_transfer_data(stream.state.next_transfer_offset, self.settings.transfer_batch_size)
        if not data:
            return False
        self._send_with_followers(stream, data)
        if stream.state.next_transfer_offset < store.max_phy_offset:
            return False  # more than that: the task goes on
        stream.just_pushed = True
        asyncio.get_running_loop().call_soon(stream.pass_ended)
        return True

    def _send_with_followers(self, stream: "_Stream", data: bytes) -> None:
        """Send ``data`` (the transfer at the stream's offset) and, in the same write, the transfers
        after it that were written lately, up to WRITE_TRANSFERS in all: a put larger than
        haTransferBatchSize (a batch) reaches the slave in one read, is written there with one
        append and acknowledged once, instead of once per transfer."""
        store, limit = self.store, self.settings.transfer_batch_size
        chunks = [data]
        offset = stream.state.next_transfer_offset + len(data)
        while len(chunks) < WRITE_TRANSFERS:
            more = store.recent_transfer_data(offset, limit)
            if not more:
                break
            chunks.append(more)
            offset += len(more)
        stream.sent(chunks, store.max_phy_offset)

    def _accept(self) -> HALink:
        """A slave connecting: its offset reports are read as they arrive (``_reports``), its
        transfers sent by a task of its own (``_run_connection``)."""
        state = SlaveState("?")
        first_report = asyncio.get_running_loop().create_future()
        return HALink(functools.partial(self._reports, state, first_report), "slave",
                      functools.partial(self._connected, state, first_report))

    def _connected(self, state: SlaveState, first_report: asyncio.Future, link: HALink) -> None:
        peer = link.transport.get_extra_info("peername")
        state.address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._tasks.spawn(self._run_connection(link, state, first_report), f"ha-slave-{state.address}")

    async def _run_connection(self, link: HALink, state: SlaveState, first_report: asyncio.Future) -> None:
        stream = _Stream(link, state)
        key = next(self._ids)
        self._connections[key] = stream
        log.info("slave %s connected", state.address)
        housekeeping = self.settings.housekeeping_interval_ms / 1000
        sending = asyncio.create_task(self._send(stream, first_report))
        try:
            async with IdleLimit(housekeeping, f"no offset report for {housekeeping:g} s (haHousekeepingInterval)") \
                    as idle:
                link.touched = idle.touch
                link.release()
                await asyncio.wait((link.ended, sending), return_when=asyncio.FIRST_COMPLETED)
            ended = [t.exception() for t in (link.ended, sending) if t.done() and not t.cancelled()]
            error = next((e for e in ended if e is not None), None)
            if isinstance(error, (OSError, HAFrameError)):
                log.info("slave %s disconnected: %s", state.address, error or "connection closed")
            elif error is not None:
                log.error("slave %s: replication failed", state.address, exc_info=error)
        except TimeoutError as exc:
            log.info("slave %s disconnected: %s", state.address, exc)
        finally:
            self._connections.pop(key, None)
            self._membership_changed()
            if not self._connections:  # waits that timed out are dropped here, not only by later acks
                self._waiters = [w for w in self._waiters if not w[2].done()]
                heapq.heapify(self._waiters)
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            link.close()
            if not first_report.done():
                first_report.cancel()

    def _reports(self, state: SlaveState, first_report: asyncio.Future, unread: bytearray) -> None:
        """What a slave sent (HALink calls it as it arrives): of several offset reports in a row
        only the last counts (each is the slave's whole CommitLog end), a hello or goodbye in
        its place."""
        size = OFFSET_REPORT.size
        pos, end, offset = 0, len(unread), None
        try:
            while end - pos >= size:
                frame = bytes(unread[pos:pos + size])
                if not first_report.done() and state.identity is None and is_hello(frame):
                    if end - pos < HELLO.size:
                        break
                    hello = decode_hello_rest(bytes(unread[pos + size:pos + HELLO.size]))
                    pos += HELLO.size
                    state.identity, state.epoch = hello.identity, hello.epoch
                    log.info("slave %s is broker %d (epoch %d)", state.address, hello.identity, hello.epoch)
                    self._membership_changed()
                    continue
                pos += size
                if frame == GOODBYE and state.identity is not None:
                    if offset is not None:  # what it reported before saying goodbye
                        self._slave_reported(state, offset)
                        offset = None
                    state.leaving = True
                    self._member_caught_up.pop(state.identity, None)
                    log.info("slave %s (broker %d) is shutting down: proposing the in-sync set without it",
                             state.address, state.identity)
                    self._membership_changed()
                    continue
                offset = decode_offset_report(frame)
                if not first_report.done():
                    first_report.set_result(offset)
                    self._slave_reported(state, offset)
                    offset = None
        finally:
            del unread[:pos]
        if offset is not None:
            self._slave_reported(state, offset)

    def _slave_reported(self, state: SlaveState, offset: int) -> None:
        state.acknowledge(offset)
        if self.in_sync is None:
            self._acknowledged(offset)
        elif self._counts(state):
            self._member_acknowledged(state.identity, offset)

    def _member_acknowledged(self, identity: int, offset: int) -> None:
        if offset <= self._member_acked.get(identity, -1):
            return
        self._member_acked[identity] = offset
        self.acked_offset = max(self.acked_offset, offset)
        if identity in self.waited_for:
            self._advance()

    def _advance(self) -> None:
        """Controller mode: answer the puts every member now holds, and make consumable only
        what they hold (RocketMQ 5's confirm offset): a consumer never reads a message that a
        failover to a member could take back."""
        confirmed = self.confirmed()
        self._release(confirmed)
        self.store.set_visible_limit(confirmed if self.waited_for else None)

    async def _send(self, stream: "_Stream", first_report: asyncio.Future) -> None:
        requested = await first_report
        store, settings, state, link, wake = self.store, self.settings, stream.state, stream.link, stream.wake
        if requested == 0:  # a new slave starts at the master's last CommitLog file
            head = store.max_phy_offset
            requested = head - head % settings.commit_log_file_size
        if requested > store.max_phy_offset:
            log.warning("slave %s asks for offset %d, beyond this master's CommitLog end %d: it gets data once "
                        "the master's log reaches it (was the master's store replaced?)", state.address, requested,
                        store.max_phy_offset)
        state.next_transfer_offset = requested
        log.info("slave %s: transferring the CommitLog from offset %d", state.address, requested)
        heartbeat = settings.heartbeat_interval_ms / 1000
        linger = settings.async_linger_ms / 1000
        stream.last_write = time.monotonic()
        warned = False
        loop = asyncio.get_running_loop()
        beat: asyncio.TimerHandle | None = None  # wakes the stream when a heartbeat may be due

        def beat_due() -> None:
            nonlocal beat
            beat = None
            wake.set()

        try:
            while True:
                wake.clear()  # before reading: data stored after this read sets it again
                offset = state.next_transfer_offset
                data = await store.transfer_data(offset, settings.transfer_batch_size)
                if not data and offset < store.min_phy_offset and not warned:
                    warned = True
                    log.warning("slave %s needs offset %d, which retention deleted (the CommitLog starts at %d): "
                                "it cannot catch up from this master", state.address, offset, store.min_phy_offset)
                if data:
                    self._send_with_followers(stream, data)
                    await link.drain()
                    continue
                state.probe_from(store.max_phy_offset, time.monotonic())
                idle = time.monotonic() - stream.last_write
                if idle >= heartbeat:
                    link.write(encode_transfer(offset))
                    await link.drain()
                    stream.last_write = time.monotonic()
                    continue
                # The heartbeat's timer stays armed across waits (new data wakes the stream far more
                # often than a heartbeat is due): no timer armed and cancelled per transfer.
                if beat is None:
                    beat = loop.call_later(heartbeat - idle, beat_due)
                stream.parked = True  # _on_write may now send new data itself
                try:
                    await wake.wait()
                finally:
                    stream.parked = False
                # Woken by new data (the heartbeat's timer, still armed, did not fire): linger when
                # nobody waits for this transfer, so what comes meanwhile goes with it.
                if linger and beat is not None and not self._push_on_write and self.in_sync is None:
                    await asyncio.sleep(linger)
        finally:
            if beat is not None:
                beat.cancel()


class _Stream:
    """One slave's connection as the master's sending side sees it."""

    __slots__ = ("link", "state", "wake", "last_write", "parked", "just_pushed")

    def __init__(self, link: HALink, state: SlaveState) -> None:
        self.link = link
        self.state = state  # its next_transfer_offset: where the next transfer starts
        self.wake = asyncio.Event()  # set by new data (or the heartbeat's timer)
        self.last_write = 0.0  # when the stream last sent a transfer or heartbeat (time.monotonic)
        self.parked = False  # its task waits for new data
        self.just_pushed = False  # _on_write sent a transfer in this loop pass

    def sent(self, chunks: list[bytes], master_end: int) -> None:
        """Write ``chunks`` (contiguous CommitLog bytes from the stream's offset) as one transfer
        each, in one write; the stream's offset moves past them."""
        state = self.state
        offset = state.next_transfer_offset
        frames = []
        for chunk in chunks:
            frames.append(encode_transfer(offset, chunk))
            offset += len(chunk)
        self.link.write(frames[0] if len(frames) == 1 else b"".join(frames))
        state.next_transfer_offset = offset
        self.last_write = time.monotonic()
        state.probe_from(master_end, self.last_write)

    def pass_ended(self) -> None:
        self.just_pushed = False


def _settle(future: asyncio.Future, status: PutStatus) -> None:
    if not future.done():
        future.set_result(status)
