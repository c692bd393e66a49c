"""The store's asyncio face: the (synchronous, thread-safe) MessageStore as the broker's event
loop uses it. The threads it runs the store in, and how their results reach the loop, are in
store/loop_bridge.py.

Appends (puts) run on the event loop itself while they are fast, as RocketMQ appends in the
request thread: an append is a copy into the page cache, microseconds, and handing it to a
thread costs more than it (a wake-up each way, the GIL passed back and forth; measured in
bench/RESULTS.md). An append that takes longer than ``slow_append_ms`` (dirty-page
throttling, a stalled disk) moves appends to the store's single writer thread for
``OFFLOAD_SECONDS``, so the loop keeps serving pulls, heartbeats and admin requests while
the disk is slow, and admission control (broker/flow_control.py) sees the writer's queue.
A put on the loop is answered before its ConsumeQueue entries and index keys are written
(``defer_dispatch``, RocketMQ's ReputMessageService): they are written by a callback queued
right behind it, so they run after the answer leaves and before the loop reads anything else
(any request a client sends after reading the answer finds the message). The arrival is
announced after that callback. A failed dispatch (a full disk) is retried every
``DISPATCH_RETRY_SECONDS`` while the store refuses new puts; the stored messages stay.
With ``append_on_loop`` false every append goes to the writer thread. A pull whose data is in
the page cache reads on the loop too (page-cache copies, cheaper than the read pool's thread
hop each way): one of its queue's newest entries as it is, an older one after asking the page
cache (its ConsumeQueue entries read with preadv RWF_NOWAIT, its records' pages counted with
cachestat(2)), which hands the pull to the pool when a page is not cached. Everything else
that may touch the disk (reads from disk, fsyncs, retention, load and shutdown) runs in
threads; reads use a small pool so a cold read never delays a send. After a write the arrival
is announced on the loop to wake held pulls for that queue.

Dispatch rounds: when one read from a connection holds several requests, the connection opens
a round (``open_round``), runs the requests eagerly, and closes it (``close_round``) before any
answer of that read leaves. Puts that would append on the loop park meanwhile
(common/eager.py) and are written at the close with ``MessageStore.put_group``: one pwrite for
all their CommitLog records, one per ConsumeQueue and one for the index entries, instead of
three per message (a Java producer with 64 sends in flight delivers ~11 per read; measured in
bench/RESULTS.md). Each parked send then continues with its own result, so a failed write
fails exactly the sends it held. A put that must go to the writer thread first writes the puts
parked before it, so no queue's order changes.

Writes through the writer thread keep their arrival order (one thread; an append runs on the
loop only while that thread has nothing queued or running). Its hand-offs are batched both
ways: the thread takes every put queued since it last looked, and the results (and
group-commit acknowledgements) reach the loop with one wake-up per batch, not per put.

SYNC_FLUSH (group commit): the writer thread only appends; it never fsyncs. A put whose
WAIT is true then waits, on the loop, for a future that the store's group-commit thread
resolves once an fsync covers the put's last byte; that thread fsyncs once for every put
waiting at the time, so concurrent sends share fsyncs and the writer keeps appending
meanwhile. After syncFlushTimeout the send is answered FLUSH_DISK_TIMEOUT (the message is
stored). A put with WAIT=false is answered at once and only nudges the flush thread.

ASYNC_FLUSH: the broker's timers call ``flush_commit_log_timed`` / ``flush_consume_queues_timed``
(in the flush thread), and ``clean`` for retention (in its own thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

from ferrymq.common.eager import Parked
from ferrymq.common.message import MessageExt, record_store_timestamp
from ferrymq.store.config import SYNC_FLUSH
from ferrymq.store.flush import GroupCommitStats, settle_flush_wait
from ferrymq.store.loop_bridge import FlushWaits, LoopCompletions, WriteBacklog, WriterThread
from ferrymq.store.mapped_file import NotCached
from ferrymq.store.message_store import MessageStore
from ferrymq.store.replica import ReplicaAppender
from ferrymq.store.results import AppendResult, GetResult, PutStatus, QueryMessageResult
from ferrymq.store.retention import CleanResult
from ferrymq.store.timer_store import TakenSlot
from ferrymq.store.timer_pending import PendingTimers

T = TypeVar("T")

log = logging.getLogger(__name__)

# How long appends stay in the writer thread after one was slow on the loop.
OFFLOAD_SECONDS = 10.0
# How soon a dispatch that failed (a full disk) is tried again.
DISPATCH_RETRY_SECONDS = 1.0
# A pull from one of a queue's newest entries (1.25 MiB of ConsumeQueue, written lately) reads on
# the loop without asking the page cache first; an older one only what the page cache holds.
RECENT_QUEUE_ENTRIES = 65536
# A slave's transfer from the master's newest CommitLog bytes reads on the loop (page-cache copies).
RECENT_TRANSFER_BYTES = 16 << 20
# A slave writes a transfer up to this size on the loop, as a master's put, when the writer is idle.
LOOP_REPLICA_BYTES = 256 << 10

# topic, queue id, the queue's new max offset, the messages just stored there
ArrivalListener = Callable[[str, int, int, Sequence[MessageExt]], None]


class QueuedPuts:
    """Puts waiting for the writer thread as one job: open to more until the thread takes it.

    The loop thread adds, the writer thread closes; the lock makes "added" and "taken" exclusive,
    so a put is either in the group the thread writes or refused here (and then starts a job of
    its own)."""

    __slots__ = ("puts", "results", "_lock", "_closed")

    def __init__(self, put: MessageExt | list[MessageExt], results: asyncio.Future) -> None:
        self.puts: list[MessageExt | list[MessageExt]] = [put]
        self.results = results  # the group's results, in the order of ``puts``
        self._lock = threading.Lock()
        self._closed = False

    def add(self, put: MessageExt | list[MessageExt]) -> bool:
        with self._lock:
            if self._closed:
                return False
            self.puts.append(put)
            return True

    def close(self) -> list[MessageExt | list[MessageExt]]:
        with self._lock:
            self._closed = True
            return self.puts


class AsyncMessageStore:
    """What the broker's processors and services use of the store. Calls that may touch the
    disk are coroutines run in the store's threads; those answered from memory (queue
    offsets, CommitLog bounds) are plain methods. ``sync_store`` is for the store package
    (and its tests) only: code outside the store goes through the methods here."""

    def __init__(self, store: MessageStore, *, read_threads: int = 4, append_on_loop: bool = True,
                 slow_append_ms: int = 100) -> None:
        self.sync_store = store
        self._writer = WriterThread()
        self._queued_puts: QueuedPuts | None = None  # the writer thread's last job, while it takes more puts
        self._append_on_loop = append_on_loop
        self._slow_append_s = slow_append_ms / 1000
        self._offloaded_until = 0.0  # monotonic time until which appends go to the writer thread
        self.appends_on_loop = 0  # puts appended on the event loop so far
        self.appends_in_thread = 0  # puts handed to the writer thread (slow disk, a new queue, or configured)
        self.reads_on_loop = 0  # pull reads of recent data done on the event loop
        self.reads_in_pool = 0  # pull reads done in the read pool (older data, or configured)
        self._round: list[tuple[MessageExt | list[MessageExt], Parked]] | None = None  # puts parked in the open round
        self.round_writes = 0  # writes of parked puts (each: one write per file for all of them)
        self.round_puts = 0  # puts written by those writes
        self._completions: LoopCompletions | None = None
        self._flush_waits: FlushWaits  # made with the loop's completions
        self._readers = ThreadPoolExecutor(read_threads, thread_name_prefix="store-read")
        # fsync gets its own thread: a slow disk delays durability, never the next append.
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="store-flush")
        # Retention deletes files and may take a while: it must not hold up the timed flushes.
        self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="store-clean")
        self.arrival_listeners: list[ArrivalListener] = []  # messages became consumable
        # Listeners of one topic's arrivals only (the delay and timer services' system topics):
        # the sends to every other topic do not call them.
        self.topic_arrival_listeners: dict[str, list[ArrivalListener]] = {}
        # The CommitLog grew to the offset given (before its messages are consumable): replication
        # sends it on, the lag's timeline notes when.
        self.write_listeners: list[Callable[[int], None]] = []
        # The dispatch of puts made on the loop, queued behind them (or its retry after a failure),
        # and the arrivals to announce once it has run.
        self._dispatch_handle: asyncio.Handle | None = None
        # Each with the CommitLog offset its records end at (a visibility limit may hold it back).
        self._arrivals: list[tuple[str, int, int, Sequence[MessageExt], int]] = []
        # SYNC_MASTER (broker/ha): for a stored put, a future of the status its replication ends with
        self.replication_wait: Callable[[AppendResult], asyncio.Future[PutStatus]] | None = None

    def _loop_completions(self) -> LoopCompletions:
        loop = asyncio.get_running_loop()
        if self._completions is None or self._completions.loop is not loop:
            self._completions = LoopCompletions(loop)
            self._flush_waits = FlushWaits(self._completions, self.sync_store)  # per loop, as the completions
        return self._completions

    def _loop_flush_waits(self) -> FlushWaits:
        """This loop's SYNC_FLUSH waits, made together with its completions. Asked on every
        SYNC_FLUSH send: once made, they are not checked against the running loop again (a
        store serves one loop; ``load`` and every offloaded write make them for theirs)."""
        if self._completions is None:
            self._loop_completions()
        return self._flush_waits

    async def _write(self, fn: Callable[..., T], *args, **kwargs) -> T:
        completions = self._loop_completions()
        future = completions.loop.create_future()
        self._queued_puts = None  # puts queued after this call are written after it
        self._writer.submit(completions, future, fn, args, kwargs)
        return await future

    async def _put_in_thread(self, put: MessageExt | list[MessageExt]) -> AppendResult:
        """A put handed to the writer thread. Puts that queue up behind the thread's current
        work join one job and are written together, one write per file (as a round on the loop
        is): under a backlog each put would otherwise cost the thread its own appends, dispatch
        and hand-back, and the backlog would feed itself."""
        queued = self._queued_puts
        if queued is None or not queued.add(put):
            completions = self._loop_completions()
            queued = self._queued_puts = QueuedPuts(put, completions.loop.create_future())
            self._writer.submit(completions, queued.results, self._put_queued, (queued,), {})
        index = len(queued.puts) - 1
        return (await asyncio.shield(queued.results))[index]

    def _put_queued(self, queued: "QueuedPuts") -> list[AppendResult]:
        """In the writer thread: the queued puts, closed to new ones, in one group; each
        dispatched before it returns."""
        return self.sync_store.put_group(queued.close())

    async def _append(self, put: MessageExt | list[MessageExt]) -> AppendResult:
        """A put (a message, or a batch for one queue): on the loop while appends are fast and
        the writer thread is idle, else queued. A queue's first put goes to the thread too: it
        creates the queue's directory and files, file-system work rather than a copy (8 000
        new queues at once held the loop for seconds: bench/RESULTS.md, broker memory).
        While a dispatch round is open (``open_round``) an on-loop put parks until the round
        closes, and is written with the round's other puts."""
        first = put if isinstance(put, MessageExt) else put[0]
        started = time.monotonic()
        if (not self._append_on_loop or not self._writer.idle or started < self._offloaded_until
                or not self.sync_store.has_queue(first.topic, first.queue_id)):
            if self._round:  # puts parked before this one are written before it, as they came
                self._write_round()
            self.appends_in_thread += 1
            return await self._put_in_thread(put)
        self.appends_on_loop += 1
        if self._round is not None:
            ticket = Parked()
            self._round.append((put, ticket))
            return await ticket
        result = self.sync_store.put_group([put], defer_dispatch=True)[0]
        self._dispatch_soon()
        self._check_append_time(started)
        return result

    def _dispatch_soon(self) -> None:
        if self._dispatch_handle is None:
            # The loop the store serves, known since ``load`` (asking asyncio for the running loop
            # costs a getpid system call: one a send).
            completions = self._completions
            loop = completions.loop if completions is not None else asyncio.get_running_loop()
            self._dispatch_handle = loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Make the puts stored on the loop consumable, then announce their arrivals (those a
        visibility limit still holds back wait for the call that releases them)."""
        self._dispatch_handle = None
        store = self.sync_store
        if not store.dispatch_pending():
            self._dispatch_handle = asyncio.get_running_loop().call_later(DISPATCH_RETRY_SECONDS, self._dispatch)
            return
        arrivals = self._arrivals
        if not arrivals:
            return
        if store.visibility_limited:
            visible = store.visible_end
            self._arrivals = [a for a in arrivals if a[4] > visible]
            arrivals = [a for a in arrivals if a[4] <= visible]
        else:
            self._arrivals = []
        for topic, queue_id, max_offset, msgs, _ in arrivals:
            self._notify_arrival(topic, queue_id, max_offset, msgs)

    def set_visible_limit(self, limit: int | None) -> None:
        """Controller mode's master: messages become consumable (and held pulls hear of them)
        only once they end at or before CommitLog offset ``limit``, what every in-sync member
        holds; ``None`` lifts the limit. Raising it dispatches what it now covers."""
        self.sync_store.set_visible_limit(limit)
        if limit is None and self._dispatch_handle is None:  # at once: replicated writes may follow
            self._dispatch()
        elif self.sync_store.dispatch_backlog or self._arrivals:
            self._dispatch_soon()

    def _check_append_time(self, started: float) -> None:
        """An append that held the loop too long moves appends to the writer thread for a while."""
        took = time.monotonic() - started
        if took > self._slow_append_s:
            self._offloaded_until = started + took + OFFLOAD_SECONDS
            log.warning("an append took %.0f ms on the event loop: appends go to the writer thread for %.0f s",
                        took * 1000, OFFLOAD_SECONDS)

    def open_round(self) -> None:
        """A connection starts dispatching the requests of one read: puts made on the loop
        until ``close_round`` park (their coroutines are run eagerly by the connection, see
        common/eager.py) and are then written together, with one write per file."""
        self._round = []

    def close_round(self) -> None:
        """Write the puts parked since ``open_round``; the connection then resumes their
        coroutines, which find their results (before any answer of that read leaves)."""
        self._write_round()
        self._round = None

    def _write_round(self) -> None:
        """Write the puts parked in the open round so far and give each its result."""
        parked = self._round
        if not parked:
            return
        self._round = []
        self.round_writes += 1
        self.round_puts += len(parked)
        started = time.monotonic()
        try:
            results = self.sync_store.put_group([put for put, _ in parked], defer_dispatch=True)
            self._dispatch_soon()
        except Exception as exc:  # a bug of ours: every parked send hears of it
            log.exception("writing a round of %d puts failed", len(parked))
            for _, ticket in parked:
                ticket.error = exc
            return
        for (_, ticket), result in zip(parked, results):
            ticket.result = result
        self._check_append_time(started)

    @property
    def appends_offloaded(self) -> bool:
        """Whether appends currently run in the writer thread (set off by a slow append)."""
        return not self._append_on_loop or time.monotonic() < self._offloaded_until

    async def _read(self, fn: Callable[..., T], *args, **kwargs) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, functools.partial(fn, *args, **kwargs))

    async def load(self, store_host: tuple[str, int]) -> None:
        """Start the writer thread and open the store in it."""
        self._writer.start()
        await self._write(self.sync_store.load, store_host)

    async def put_message(self, msg: MessageExt, *, wait: bool = True) -> AppendResult:
        """Store one message; answer per the flush policy (``wait``: the message's WAIT flag)."""
        result = await self._append(msg)
        self._announce(msg.topic, msg.queue_id, result, (msg,))
        if self._answers_at_once():
            return result
        replica = self._replica_wait(result, wait and msg.wait_store_msg_ok)
        return await self._replicated(await self._flushed(result, wait and msg.wait_store_msg_ok), replica)

    async def put_messages(self, msgs: list[MessageExt], *, wait: bool = True) -> AppendResult:
        """Store a batch (one topic and queue); answer per the flush policy. ``wait``: whether
        the sender waits for it, which the caller decides from the request's WAIT flag and each
        message's (``batch_messages`` tells the send path; this does not look at each message)."""
        if not msgs:
            return self.sync_store.put_messages(msgs)  # refused: an empty batch
        result = await self._append(msgs)
        self._announce(msgs[0].topic, msgs[0].queue_id, result, msgs)
        if self._answers_at_once():
            return result
        replica = self._replica_wait(result, wait)
        return await self._replicated(await self._flushed(result, wait), replica)

    async def put_group(self, puts: Sequence[MessageExt | list[MessageExt]], *, all_or_nothing: bool = False,
                        wait: bool = True) -> list[AppendResult]:
        """Store several puts (each a message, or a batch for one queue; any topics and queues)
        in the writer thread with one write per file (``MessageStore.put_group``), each with its
        own result: all or none with ``all_or_nothing`` (a batch whose messages go to several
        queues), else a refused put holds up no other (timers firing). Not the send fast path:
        written after any parked round. Answered per the flush policy and SYNC_MASTER's
        replication once the last stored put is covered: one fsync and one replication wait
        cover them all, and their outcome is every stored put's."""
        if not puts:
            return []
        if self._round:  # puts parked before these are written before them, as they came
            self._write_round()
        self.appends_in_thread += 1
        results = await self._write(self.sync_store.put_group, list(puts), all_or_nothing=all_or_nothing)
        last: AppendResult | None = None
        for put, result in zip(puts, results):
            msgs = [put] if isinstance(put, MessageExt) else put
            self._announce(msgs[0].topic, msgs[0].queue_id, result, msgs)
            if result.status is PutStatus.PUT_OK and (last is None or result.wrote_offset > last.wrote_offset):
                last = result
        if last is not None:
            wait = wait and all(m.wait_store_msg_ok for put in puts
                                for m in ([put] if isinstance(put, MessageExt) else put))
            replica = self._replica_wait(last, wait)
            waited = await self._replicated(await self._flushed(last, wait), replica)
            for result in results:
                if result.status is PutStatus.PUT_OK:
                    result.status = waited.status
        return results

    def _answers_at_once(self) -> bool:
        """ASYNC_FLUSH without SYNC_MASTER's replication wait: a put's answer waits for nothing
        (most sends: the two waits below would each return at once)."""
        return self.replication_wait is None and self.sync_store.config.flush_disk_type != SYNC_FLUSH

    def _replica_wait(self, result: AppendResult, wait: bool) -> asyncio.Future[PutStatus] | None:
        """SYNC_MASTER: start waiting for a slave to confirm the put (alongside the flush wait)."""
        if self.replication_wait is None or not wait or result.status is not PutStatus.PUT_OK:
            return None
        return self.replication_wait(result)

    @staticmethod
    async def _replicated(result: AppendResult, replica: asyncio.Future[PutStatus] | None) -> AppendResult:
        """As RocketMQ, a failed replication wait decides the answer over a failed flush wait."""
        if replica is not None:
            status = await replica
            if status is not PutStatus.PUT_OK:
                result.status = status
        return result

    async def _flushed(self, result: AppendResult, wait: bool) -> AppendResult:
        """SYNC_FLUSH: hold the answer until the group commit's fsync covers the message."""
        store = self.sync_store
        if not store.config.sync_flush or result.status is not PutStatus.PUT_OK:
            return result
        end = result.wrote_offset + result.wrote_bytes
        if not wait:
            store.request_flush(end, None)
            return result
        timeout_ms = store.config.sync_flush_timeout
        if timeout_ms <= 0:  # no time to wait at all: timed out (the fsync still happens)
            store.request_flush(end, None)
            return settle_flush_wait(result, timeout_ms, None)
        # Puts written together (a round's) wait for the group's end, all for the same one: they
        # share one wait and are answered together (one fsync covers them all anyway).
        end = max(end, result.group_end)
        waits = self._loop_flush_waits()
        return settle_flush_wait(result, timeout_ms, await waits.add(end, timeout_ms / 1000))

    def _announce(self, topic: str, queue_id: int, result: AppendResult, msgs: Sequence[MessageExt]) -> None:
        """Tell the arrival listeners (held pulls) of a stored put, once it is consumable."""
        if result.status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
            end = result.wrote_offset + result.wrote_bytes
            for wrote in self.write_listeners:
                wrote(end)
            if self.sync_store.visibility_limited:  # dispatched (and announced) once the limit covers it
                self._arrivals.append((topic, queue_id, result.queue_offset + result.msg_num, msgs, end))
                self._dispatch_soon()
            elif self._dispatch_handle is not None:  # its dispatch (or an earlier one) is still to run
                self._arrivals.append((topic, queue_id, result.queue_offset + result.msg_num, msgs, 0))
            else:
                self._notify_arrival(topic, queue_id, result.queue_offset + result.msg_num, msgs)

    def _notify_arrival(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt]) -> None:
        for listener in self.arrival_listeners:
            listener(topic, queue_id, max_offset, msgs)
        for listener in self.topic_arrival_listeners.get(topic, ()):
            listener(topic, queue_id, max_offset, msgs)

    def add_topic_arrival_listener(self, topic: str, listener: ArrivalListener) -> None:
        """``listener`` hears of the arrivals of ``topic`` only."""
        self.topic_arrival_listeners.setdefault(topic, []).append(listener)

    async def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                           tag_filter: Callable[[int], bool] | None = None,
                           record_filter: Callable[[bytes], bool] | None = None) -> GetResult:
        """A pull's read: on the loop when what it reads is in the page cache (a copy, as appends
        are), else in the read pool so a read from disk never stalls the loop.

        A queue's newest entries (the last RECENT_QUEUE_ENTRIES, written lately) are read on the
        loop as they are; older ones only from the page cache (``nowait``), which declines when a
        page left it. Either declines when the first record is outside the CommitLog's in-memory
        window (accessMessageInMemoryMaxRatio), after one ConsumeQueue read. Appends kept off the
        loop by a slow disk keep reads off it too."""
        if not self.appends_offloaded:
            recent = self.sync_store.get_max_offset_in_queue(topic, queue_id) - offset <= RECENT_QUEUE_ENTRIES
            try:
                result = self.sync_store.get_messages(group, topic, queue_id, offset, max_msg_nums, tag_filter,
                                                      record_filter, hot_only=True, nowait=not recent)
            except NotCached:
                result = None
            if result is not None:
                self.reads_on_loop += 1
                return result
        self.reads_in_pool += 1
        return await self._read(self.sync_store.get_messages, group, topic, queue_id, offset, max_msg_nums, tag_filter,
                                record_filter)

    async def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        return await self._read(self.sync_store.query_message, topic, key, max_num, begin, end)

    async def query_messages(self, queries: Sequence[tuple[str, str, int, int, int]]) -> list[QueryMessageResult]:
        """``query_message`` of each (topic, key, max_num, begin, end), in one reader thread call."""
        query = self.sync_store.query_message
        return await self._read(lambda: [query(*q) for q in queries]) if queries else []

    # ------------------------------------------------------------ queues and the CommitLog

    def write_backlog(self) -> WriteBacklog:
        """How far behind the writer thread is (read without locking, for admission control):
        puts that joined a queued job count one each."""
        backlog = self._writer.backlog()
        queued = self._queued_puts
        if queued is not None and backlog.pending and len(queued.puts) > 1:
            return dataclasses.replace(backlog, pending=backlog.pending + len(queued.puts) - 1)
        return backlog

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's next offset (its message count including deleted ones); 0 if unknown."""
        return self.sync_store.get_max_offset_in_queue(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still readable; 0 if unknown."""
        return self.sync_store.get_min_offset_in_queue(topic, queue_id)

    @property
    def store_host(self) -> tuple[str, int] | None:
        """The IP literal and port stamped into records; known once the store has loaded."""
        return self.sync_store.store_host

    @property
    def max_phy_offset(self) -> int:
        return self.sync_store.max_phy_offset

    @property
    def min_phy_offset(self) -> int:
        return self.sync_store.min_phy_offset

    @property
    def commit_log_segments(self) -> int:
        return len(self.sync_store.commit_log.segments)

    @property
    def flushed_phy_offset(self) -> int:
        """Where the CommitLog is fsynced up to: what a crash of the machine keeps."""
        return self.sync_store.flushed_phy_offset

    @property
    def group_commit_stats(self) -> GroupCommitStats | None:
        """SYNC_FLUSH: the group-commit thread's counters (fsyncs, the puts they answered);
        None under ASYNC_FLUSH or before the store has loaded."""
        group_commit = self.sync_store.group_commit
        return group_commit.stats if group_commit is not None else None

    @property
    def writable(self) -> bool:
        """Whether the store takes puts: it runs and its disk guard finds room."""
        return self.sync_store.writable

    @property
    def indexed_phy_offset(self) -> int:
        """How far into the CommitLog the message index reaches (QUERY_MESSAGE's
        indexLastUpdatePhyoffset); 0 without an index."""
        index = self.sync_store.index
        return index.indexed_end if index is not None else 0

    def index_file_ends(self) -> list[int]:
        """The CommitLog offset each index file reaches to, oldest file first (retention deletes
        an index file once the CommitLog it indexes is gone)."""
        index = self.sync_store.index
        return [f.header.end_phy_offset for f in index.files] if index is not None else []

    def is_in_memory(self, phys_offset: int) -> bool:
        """Whether a record is near enough the CommitLog head to be in the page cache."""
        return self.sync_store.is_in_memory(phys_offset)

    def topic_queue_ids(self) -> dict[str, list[int]]:
        return self.sync_store.topic_queue_ids()

    async def commit_log_offset(self, topic: str, queue_id: int, offset: int) -> int:
        """CommitLog offset of the queue's entry ``offset``; -1 if there is none."""
        return await self._read(self.sync_store.get_commit_log_offset_in_queue, topic, queue_id, offset)

    async def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the queue's message at ``offset``; -1 if there is none."""
        return await self._read(self.sync_store.get_store_time, topic, queue_id, offset)

    async def search_offset(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The queue offset stored nearest ``timestamp`` (SEARCH_OFFSET_BY_TIMESTAMP, reset-offset)."""
        return await self._read(self.sync_store.search_offset_by_timestamp, topic, queue_id, timestamp)

    @property
    def recorded_confirm_offset(self) -> int | None:
        return self.sync_store.recorded_confirm_offset

    def limit_lookups(self, limit: int | None) -> None:
        self.sync_store.limit_lookups(limit)

    async def look_message(self, phys_offset: int) -> bytes | None:
        """The raw record starting at ``phys_offset``; None if none does."""
        return await self._read(self.sync_store.look_message_by_offset, phys_offset)

    async def look_messages(self, phys_offsets: Sequence[int]) -> list[bytes | None]:
        """``look_message`` of each offset, read together in one reader thread call."""
        look = self.sync_store.look_message_by_offset
        return await self._read(lambda: [look(phys) for phys in phys_offsets])

    @property
    def timers_enabled(self) -> bool:
        """The store keeps a timing store (timerWheelEnable, docs/timers.md)."""
        return self.sync_store.timers is not None

    @property
    def pending_timers(self) -> PendingTimers | None:
        """Timers waiting per real topic (in memory, safe to read on the loop); None without timers."""
        timers = self.sync_store.timers
        return timers.pending if timers is not None else None

    async def take_timers(self, now_ms: int) -> TakenSlot | None:
        """The next part of a slot of timers due by ``now_ms`` (TimerStore.take), read in a reader thread."""
        return await self._read(self.sync_store.timers.take, now_ms)

    async def next_timer_due(self, horizon_ms: int) -> int | None:
        return await self._read(self.sync_store.timers.next_due_ms, horizon_ms)

    async def mark_timers_fired(self, upto_ms: int) -> None:
        await self._read(self.sync_store.timers.mark_fired, upto_ms)

    async def rewind_timers(self) -> None:
        """Take again from the fired checkpoint (a master's timer service starts)."""
        await self._read(self.sync_store.timers.rewind_taken)

    async def adopt_timers_fired(self, upto_ms: int) -> bool:
        """A slave: its master fired every timer before ``upto_ms`` (forward only, persisted)."""
        return await self._read(self.sync_store.adopt_timers_fired, upto_ms)

    async def timer_checkpoint(self) -> tuple[int, int]:
        """(fired-up-to time, synced TimerLog position) of the timing store."""
        return await self._read(self.sync_store.timers.checkpoint)

    async def earliest_message_time(self) -> int:
        """Store time of the oldest record in the CommitLog; 0 when it is empty."""
        record = await self.look_message(self.min_phy_offset)
        return record_store_timestamp(record) if record else 0

    # ------------------------------------------------------------ replication (broker/ha)

    def refuse_puts(self, reason: str | None, status: PutStatus = PutStatus.SERVICE_NOT_AVAILABLE) -> None:
        """Refuse every put with ``status`` (a slave, a fenced master, too few in-sync replicas),
        ``reason`` said in the answer's remark; ``None`` takes puts again. Replicated data is
        written all the same (``append_replica``)."""
        store = self.sync_store
        store.refuse_puts, store.refuse_status = reason, status

    def replica_appender(self) -> ReplicaAppender:
        """A slave: what writes its master's CommitLog bytes here (``append_replica``)."""
        return self.sync_store.replica_appender()

    async def transfer_data(self, offset: int, limit: int) -> bytes | None:
        """A master: up to ``limit`` CommitLog bytes from ``offset`` for a slave; None if none yet.
        On the loop when they were written lately (a slave keeping up: its SYNC_MASTER round trip
        gets no thread hop), else in the read pool."""
        if self._recent_transfer(offset):
            return self.sync_store.transfer_data(offset, limit)
        return await self._read(self.sync_store.transfer_data, offset, limit)

    def recent_transfer_data(self, offset: int, limit: int) -> bytes | None:
        """``transfer_data`` read here and now when the bytes were written lately; None when there
        are none or they are not that recent (``transfer_data`` then reads them in the pool)."""
        return self.sync_store.transfer_data(offset, limit) if self._recent_transfer(offset) else None

    def _recent_transfer(self, offset: int) -> bool:
        return not self.appends_offloaded and self.sync_store.max_phy_offset - offset <= RECENT_TRANSFER_BYTES

    def append_replica_now(self, appender: ReplicaAppender, offset: int, data: bytes | bytearray) -> int | None:
        """``append_replica`` on the loop, when it may run there: a small transfer (a slave keeping
        up) while the writer thread is idle, written as a master's put is; its dispatch runs right
        after, as a put's does, so the slave confirms first. None when it may not (then
        ``append_replica`` writes it in the writer thread)."""
        if len(data) > LOOP_REPLICA_BYTES or not self._writer.idle or self.appends_offloaded:
            return None
        started = time.monotonic()
        progress = appender.append(offset, data, defer_dispatch=True)
        self._check_append_time(started)
        for wrote in self.write_listeners:
            wrote(offset + len(data))
        self._arrivals.extend((*arrival, 0) for arrival in progress.arrivals)  # announced once dispatched
        self._dispatch_soon()
        return progress.confirmed

    async def append_replica(self, appender: ReplicaAppender, offset: int, data: bytes | bytearray) -> int:
        """A slave: bytes of the master's CommitLog, written and dispatched (held pulls wake as
        for a put); returns the CommitLog offset now confirmed. On the loop when it may run there
        (``append_replica_now``), else in the writer thread, dispatched there (catching up:
        megabytes a transfer)."""
        confirmed = self.append_replica_now(appender, offset, data)
        if confirmed is not None:
            return confirmed
        progress = await self._write(appender.append, offset, data)
        for wrote in self.write_listeners:
            wrote(offset + len(data))
        for arrival in progress.arrivals:
            self._notify_arrival(*arrival)
        return progress.confirmed

    async def reset_replica(self, appender: ReplicaAppender) -> int:
        """A slave (re)connecting: drop unwritten bytes (in the writer thread, after any write
        still queued); returns the offset to ask the master for."""
        return await self._write(appender.reset)

    async def truncate(self, offset: int) -> int:
        """Drop the CommitLog from ``offset`` on (and the queue entries pointing there), in the
        writer thread after any write still queued; returns the CommitLog's new end. Lifts the
        visibility limit: what was held back before ``offset`` becomes consumable."""
        end = await self._write(self.sync_store.truncate, offset)
        self._dispatch_soon()
        return end

    async def _in_flusher(self, fn: Callable[..., T], *args) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._flusher, functools.partial(fn, *args))

    async def flush_commit_log(self) -> None:
        """fsync everything written so far."""
        await self._in_flusher(self.sync_store.flush_commit_log)

    async def flush_commit_log_timed(self) -> None:
        """ASYNC_FLUSH's timer: flushCommitLogLeastPages / flushCommitLogThoroughInterval."""
        await self._in_flusher(self.sync_store.flush_commit_log_timed)

    async def flush_consume_queues(self) -> None:
        await self._in_flusher(self.sync_store.flush_consume_queues)

    async def flush_consume_queues_timed(self) -> None:
        await self._in_flusher(self.sync_store.flush_consume_queues_timed)

    async def clean(self) -> CleanResult:
        """One retention run (expired files, the disk guard)."""
        return await asyncio.get_running_loop().run_in_executor(self._cleaner, self.sync_store.clean)

    async def shutdown(self) -> None:
        """Finish queued writes, then flush and close the files (in the writer thread)."""
        if self._writer.running:
            await self._write(self.sync_store.shutdown)
            self._writer.stop()
        for pool in (self._readers, self._flusher, self._cleaner):
            pool.shutdown(wait=False)  # idle by now; joining would block the loop
