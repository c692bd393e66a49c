"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore).

Synchronous and thread-safe: the broker calls it from worker threads. A put encodes
outside the write lock, then appends to the CommitLog, whose write lock also covers the
dispatch of the new records (store/dispatch.py: ConsumeQueue entries and IndexFile keys),
so by the time put returns the message is pullable and queryable (no reput thread).
Reads take no lock.

The parts, each handed only what it uses: the CommitLog (commit_log.py), the table of
ConsumeQueues and the Dispatcher (dispatch.py), the IndexFiles (index_service.py), the
flusher with SYNC_FLUSH's group commit and ASYNC_FLUSH's timed flushes (flush.py),
retention and the disk guard (retention.py), recovery at load (recovery.py, RocketMQ's
normal and abnormal recovery: docs/wire-format.md#checkpoint), the checkpoint and the directory lock.
Results are in results.py. Slightly past the usual module size on purpose: what is left
here is the facade's own job (put, get, query, lifecycle), each part already elsewhere.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ferrymq.common.message import (
    MAX_PROPERTIES_LENGTH,
    MessageExt,
    Prop,
    SysFlag,
    decode_record,
    encode_properties,
    encode_records,
    place_records,
    record_store_timestamp,
)
from ferrymq.common.message_id import offset_msg_id_prefix
from ferrymq.common.validators import validate_topic
from ferrymq.store.checkpoint import StoreCheckpoint
from ferrymq.store.commit_log import BLANK_SIZE, Appended, CommitLog, PendingPut, RecoveryReport
from ferrymq.store.config import StoreConfig
from ferrymq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from ferrymq.store.dir_lock import StoreDirLock
from ferrymq.store.dispatch import ConsumeQueueTable, Dispatcher, StoredPut
from ferrymq.store.flush import FlushDone, GroupCommitService, StoreFlusher
from ferrymq.store.index_service import IndexService
from ferrymq.store.recovery import StoreRecovery
from ferrymq.store.replica import ReplicaAppender, read_for_transfer
from ferrymq.store.results import (
    AppendResult,
    GetResult,
    GetStatus,
    PutStatus,
    QueryMessageResult,
    StoreNotRunningError,
    refused,
)
from ferrymq.store.retention import CleanResult, CleanService, DiskGuard
from ferrymq.store.timer_log import TimerRecord
from ferrymq.store.timer_store import TimerStore

log = logging.getLogger(__name__)

MAX_FILTER_SCAN_BYTES = 16000  # ConsumeQueue bytes a filtered pull may scan (at least)
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


@dataclass(slots=True)
class _Prepared:
    """A put that passed its checks: its messages and their encoded records."""

    msgs: Sequence[MessageExt]
    put: PendingPut

    def stored_at(self, appended: Appended) -> StoredPut:
        first = self.msgs[0]
        return StoredPut(first.topic, first.queue_id, appended.queue_offset, appended.phys_offset, self.msgs,
                         self.put.record_sizes, self.put.dispatched)


def _records_before(put: StoredPut, offset: int) -> StoredPut | None:
    """The part of ``put`` that ends at or before CommitLog offset ``offset`` (None if none)."""
    if put.end <= offset:
        return put
    end, count = put.phys, 0
    for size in put.sizes:
        if end + size > offset:
            break
        end, count = end + size, count + 1
    return dataclasses.replace(put, msgs=put.msgs[:count], sizes=put.sizes[:count]) if count else None


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


class MessageStore:
    def __init__(self, config: StoreConfig, *, store_host: tuple[str, int] | None = None) -> None:
        """``store_host``: the IP literal and port stamped into records (STOREHOST) and offset
        msgIds; may instead be given to :meth:`load` (a broker resolves it when it starts)."""
        self.config = config
        self.store_host = store_host
        self.commit_log = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log)
        self.queues = ConsumeQueueTable(config.consume_queue_dir, config.mapped_file_size_consume_queue)
        self.index = IndexService(config) if config.message_index_enable else None
        self.timers = TimerStore(config.timer_dir, precision_ms=config.timer_precision_ms,
                                 max_delay_sec=config.timer_max_delay_sec,
                                 log_segment_size=config.mapped_file_size_timer_log,
                                 roll_window_slots=config.timer_roll_window_slot) if config.timer_wheel_enable else None
        self.dispatcher = Dispatcher(self.queues, self.index, config.delay_level_millis(), self.timers)
        self.flusher = StoreFlusher(config, self.commit_log, self.queues, self.index, self.dispatcher)
        self.disk_guard = DiskGuard(config)
        self.clean_service = CleanService(config, self.commit_log, self.queues, self.index, self.disk_guard, self.timers)
        self.commit_log.on_roll = self.disk_guard.check_on_roll
        self.checkpoint: StoreCheckpoint | None = None
        self.dir_lock = StoreDirLock(config.store_path_root_dir)
        self._running = False
        # Records within this many bytes of the CommitLog head count as "in memory" (page cache).
        self.in_memory_window = int(_total_physical_memory() * config.access_message_in_memory_max_ratio / 100)
        self.last_recovery: RecoveryReport | None = None
        self.last_exit_clean = True
        # Why puts are refused while the store runs (a slave takes data only from its master).
        self.refuse_puts: str | None = None
        self.refuse_status = PutStatus.SERVICE_NOT_AVAILABLE  # what a refused put is answered with
        self._msg_id_prefix = ""  # the store host's part of every offset msgId (set by load)
        # Runs put with defer_dispatch and not yet in their ConsumeQueues and IndexFile, in
        # CommitLog order (appended under the CommitLog's lock); drained under _dispatch_lock.
        self._undispatched: collections.deque[tuple[list[StoredPut], int, int]] = collections.deque()
        self._dispatch_lock = threading.Lock()
        # Controller mode's master: records past this CommitLog offset (what every in-sync member
        # holds) are stored but not yet consumable; None: everything is (docs/failover.md).
        self._visible_limit: int | None = None
        # Lookups (QUERY_MESSAGE, VIEW_MESSAGE_BY_ID) serve no record ending past this (None: any):
        # a broker restarted in controller mode, until it knows what the group keeps.
        self._lookup_limit: int | None = None
        self._recorded_confirm = 0  # the checkpoint's confirm offset as the store opened

    # ------------------------------------------------------------ lifecycle

    def load(self, store_host: tuple[str, int] | None = None) -> None:
        """Open or create the store and recover it; put and get work when this returns."""
        self.store_host = store_host or self.store_host
        if self.store_host is None:
            raise ValueError("the store needs its store host (IP literal, port) before it loads")
        self._msg_id_prefix = offset_msg_id_prefix(*self.store_host)  # offset msgIds embed it: an IP literal
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        clean = self.dir_lock.acquire()
        self.last_exit_clean = clean
        try:
            self.checkpoint = self.flusher.checkpoint = StoreCheckpoint(self.config.checkpoint_path)
            self._recorded_confirm = self.checkpoint.confirm_offset
            self.commit_log.load()
            self.queues.load()
            if self.index is not None:
                self.index.load()
            if self.timers is not None:
                self.timers.open(int(time.time() * 1000), fired_floor_ms=self.checkpoint.timer_fired_ms)
            recovery = StoreRecovery(self.commit_log, self.queues, self.dispatcher, self.checkpoint, self.flusher,
                                     check_crc=self.config.check_crc_on_recover, abort_path=self.dir_lock.abort_path)
            self.last_recovery = recovery.run(clean)
            self._recount_timers()
        except BaseException:
            self._close_files()
            self.dir_lock.release(clean=clean)  # an unclean past stays unclean for the next try
            raise
        self._running = True
        if self.config.sync_flush:
            self.flusher.start_group_commit()
        self.clean_service.check_space()  # refuse sends from the start if the disk is already over the guard

    def shutdown(self) -> None:
        """Flush and close. Call after the broker stopped calling in."""
        if not self._running:
            return
        self.dispatch_pending()
        self._running = False
        self.flusher.stop_group_commit()
        self._close_files()
        self.dir_lock.release()

    def _close_files(self) -> None:
        self.commit_log.close()  # waits for an in-flight put, flushes
        self.queues.close()
        if self.index is not None:
            self.index.close()
        if self.timers is not None:
            self.timers.close()
        if self.checkpoint is not None:
            if self.timers is not None:
                self.checkpoint.timers_fired(self.timers.checkpoint()[0])
            head_offset, head_ts = self.commit_log.flushed_offset, self.dispatcher.last_dispatched_ts
            self.checkpoint.commit_log_flushed(head_offset, head_ts)
            self.checkpoint.logics_flushed(head_ts, self.index.last_indexed_timestamp if self.index else head_ts)
            self.checkpoint.close()

    @property
    def group_commit(self) -> GroupCommitService | None:
        return self.flusher.group_commit

    # ------------------------------------------------------------ writing

    def put_message(self, msg: MessageExt, *, wait_flush: bool = True) -> AppendResult:
        """Store one message. Sets its offsets, store time and store host; indexes it before returning.

        With SYNC_FLUSH and ``wait_flush`` (and the message's WAIT not false) it returns once
        the record is fsynced; without ``wait_flush`` the caller waits (``request_flush``)."""
        return self._flush_wait(self.put_group([msg])[0], [msg], wait_flush)

    def put_messages(self, msgs: list[MessageExt], *, wait_flush: bool = True) -> AppendResult:
        """Store a batch contiguously with consecutive queue offsets (same topic and queue)."""
        return self._flush_wait(self.put_group([msgs])[0], msgs, wait_flush)

    def put_group(self, puts: Sequence[MessageExt | list[MessageExt]], *,
                  defer_dispatch: bool = False, all_or_nothing: bool = False) -> list[AppendResult]:
        """Store several puts, each a message (as ``put_message``) or a batch (a list, as
        ``put_messages``), in order, writing each file once for as many as fit in the CommitLog's
        current segment: the broker stores the sends of one read from a connection so (one
        pwrite for all their records instead of three per message: bench/RESULTS.md). Each put
        gets its own result, as ``put_message``/``put_messages`` with ``wait_flush=False`` give
        it: a put refused on its own (too large, a bad topic) holds up no other; a write that
        fails fails its puts and every later one, and stores nothing of them.

        ``defer_dispatch``: the puts' ConsumeQueue entries and index keys are written by the
        next ``dispatch_pending`` instead of before this returns (RocketMQ's ReputMessageService:
        the broker answers a send first and makes it consumable right after, so the answer does
        not wait for those writes). A put without it dispatches the deferred runs first.
        While a visibility limit is set (``set_visible_limit``) every put is deferred.

        ``all_or_nothing``: a put refused on its own refuses every one, before anything is
        written (a batch whose messages go to several queues: docs/timers.md#batches). A write
        failing after an earlier file's write (the puts spanning two CommitLog files) is the
        exception: what that earlier write stored stays."""
        results: list[AppendResult | None] = [None] * len(puts)
        pending: list[tuple[int, _Prepared]] = []
        for i, put in enumerate(puts):
            prepared = self._prepare([put] if isinstance(put, MessageExt) else put, batch=not isinstance(put, MessageExt))
            if isinstance(prepared, AppendResult):
                results[i] = prepared
            else:
                pending.append((i, prepared))
        if all_or_nothing and len(pending) < len(puts):
            first = next(r for r in results if r is not None)
            return [refused(first.status, first.remark or first.status.name) for _ in puts]

        def dispatch(placed: list[Appended], store_ts: int) -> None:  # under the CommitLog's lock
            self.appended_run([p.stored_at(a) for (_, p), a in zip(pending, placed)], store_ts, defer_dispatch)

        while pending:
            failure = None
            try:
                placed = self.commit_log.put_run([p.put for _, p in pending], dispatch)
            except OSError as exc:  # the write and its index entries were undone: nothing was stored
                if exc.errno in _DISK_FULL_ERRNOS:
                    self.disk_guard.mark_full(f"write failed: {exc}")
                    failure = refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark(f"write failed: {exc}"))
                else:
                    log.error("CommitLog write failed: %s", exc)
                    failure = refused(PutStatus.UNKNOWN_ERROR, f"write failed: {exc}")
            except ValueError as exc:
                failure = refused(PutStatus.UNKNOWN_ERROR, f"write failed: {exc}")
            else:
                if placed is None:
                    failure = refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark("message store is not running"))
            if failure is not None:
                for i, _ in pending:
                    results[i] = AppendResult(failure.status, remark=failure.remark)
                break
            for (i, prepared), appended in zip(pending, placed):
                results[i] = self._stored(prepared, appended)
            pending = pending[len(placed):]
        stored = [r for r in results if r is not None and r.wrote_bytes]
        if stored:
            group_end = stored[-1].wrote_offset + stored[-1].wrote_bytes  # in CommitLog order
            for r in stored:
                r.group_end = group_end
        return results  # type: ignore[return-value]  # every slot is set by now

    def appended_run(self, run: list[StoredPut], store_ts: int, defer: bool) -> None:
        """Under the CommitLog's lock: a run of puts just written (a put group's, or records a
        slave copied) goes to the ConsumeQueues and IndexFile now, or with ``defer`` (or while a
        visibility limit is set) at the next ``dispatch_pending``."""
        if defer or self._visible_limit is not None:
            self._undispatched.append((run, store_ts, run[-1].end))
            return
        with self._dispatch_lock:
            self._dispatch_undispatched()  # a queue's entries go in in CommitLog order
            self.dispatcher.appended_run(run, store_ts)

    @property
    def dispatch_backlog(self) -> int:
        """Runs stored with ``defer_dispatch`` that are not yet consumable."""
        return len(self._undispatched)

    def set_visible_limit(self, limit: int | None) -> None:
        """Make records consumable only once they end at or before CommitLog offset ``limit``
        (a controller-mode master: what every in-sync member holds, so a consumer never reads
        a message a failover can take back); ``None`` lifts it. Takes effect for runs not yet
        dispatched; ``dispatch_pending`` dispatches what a raised limit now covers. The limit
        is the confirm offset the checkpoint keeps (written by its next flush)."""
        self._visible_limit = limit
        if self.checkpoint is not None:
            self.checkpoint.confirmed(limit or 0)

    @property
    def recorded_confirm_offset(self) -> int | None:
        """The confirm offset the checkpoint held when the store opened (None: none was set)."""
        return self._recorded_confirm or None

    def limit_lookups(self, limit: int | None) -> None:
        """Serve no record ending past CommitLog offset ``limit`` to QUERY_MESSAGE and
        VIEW_MESSAGE_BY_ID (``None``: lift it)."""
        self._lookup_limit = limit

    def _lookup_allowed(self, phys: int, record: bytes) -> bool:
        """Lookups follow the reads' rule: nothing past the lookup limit, nor past the
        visibility limit (a record not every in-sync replica holds yet)."""
        end = phys + len(record)
        return all(limit is None or end <= limit for limit in (self._lookup_limit, self._visible_limit))

    @property
    def visibility_limited(self) -> bool:
        return self._visible_limit is not None

    @property
    def visible_end(self) -> int:
        """The CommitLog offset up to which stored records are consumable (or about to be):
        the start of the first run the visibility limit holds back, else the CommitLog's end."""
        pending = self._undispatched
        if pending and self._visible_limit is not None:
            return pending[0][0][0].phys
        return self.commit_log.max_offset

    def dispatch_pending(self) -> bool:
        """Write the ConsumeQueue entries and index keys of the runs put with ``defer_dispatch``,
        in CommitLog order, up to the visibility limit. False when a write failed: the error is
        logged, a full disk refuses puts from then on (as a failed put does), and the runs not
        dispatched stay for the next call; their records are in the CommitLog (a restart's
        recovery would dispatch them too)."""
        if not self._undispatched:
            return True
        with self._dispatch_lock:
            try:
                self._dispatch_undispatched()
            except OSError as exc:
                if exc.errno in _DISK_FULL_ERRNOS:
                    self.disk_guard.mark_full(f"write failed: {exc}")
                log.error("indexing stored messages failed (%d run(s) wait for the next try): %s",
                          len(self._undispatched), exc)
                return False
        return True

    def _dispatch_undispatched(self) -> None:
        """Under ``_dispatch_lock``: dispatch the deferred runs; a failed one stays first."""
        pending = self._undispatched
        while pending:
            run, store_ts, end = pending[0]
            limit = self._visible_limit
            if limit is not None and end > limit:
                return
            self.dispatcher.appended_run(run, store_ts)  # all or nothing (Dispatcher.appended_run)
            pending.popleft()

    def _forget_undispatched_from(self, offset: int) -> None:
        """Under ``_dispatch_lock``: drop the deferred records at and after ``offset`` (a truncation)."""
        kept: collections.deque[tuple[list[StoredPut], int, int]] = collections.deque()
        for run, store_ts, _ in self._undispatched:
            puts = [p for p in (_records_before(put, offset) for put in run) if p is not None]
            if puts:
                kept.append((puts, store_ts, puts[-1].end))
        self._undispatched = kept

    def _prepare(self, msgs: Sequence[MessageExt], *, batch: bool) -> "_Prepared | AppendResult":
        """A put's records encoded (offsets still to stamp), or why it is refused."""
        if not self._running:
            return refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark("message store is not running"))
        if self.disk_guard.full_reason is not None:
            return refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark(self.disk_guard.full_reason))
        if self.refuse_puts is not None:
            status = self.refuse_status
            return refused(status, self.service_unavailable_remark(self.refuse_puts)
                           if status is PutStatus.SERVICE_NOT_AVAILABLE else self.refuse_puts)
        if not msgs:
            return refused(PutStatus.MESSAGE_ILLEGAL, "empty batch")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        if batch:
            transaction_mask, delay = SysFlag.TRANSACTION_MASK, Prop.DELAY  # (a loop of 32 at batch32: no calls)
            for m in msgs:
                if m.topic != topic or m.queue_id != queue_id:
                    return refused(PutStatus.MESSAGE_ILLEGAL, "all messages of a batch must have the same topic and queue")
                if m.sys_flag & transaction_mask:  # TRANSACTION_NOT_TYPE is 0
                    return refused(PutStatus.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
                if delay in m.properties and m.delay_level > 0:
                    return refused(PutStatus.MESSAGE_ILLEGAL, "batch messages cannot have a delay level")
        if (topic, queue_id) not in self.queues:  # known queues were validated when created
            error = validate_topic(topic)
            if error or queue_id < 0:
                return refused(PutStatus.MESSAGE_ILLEGAL, error or f"bad queue id {queue_id}")
        try:
            encoded = encode_records(msgs, self.store_host, self.config.max_message_size)
        except ValueError as exc:
            return refused(PutStatus.MESSAGE_ILLEGAL, str(exc))
        if isinstance(encoded[0], int):  # a message refused: (its index, what)
            m = msgs[encoded[0]]
            if encoded[1] == "body":
                return refused(PutStatus.MESSAGE_ILLEGAL,
                               f"message body size {len(m.body)} exceeds maxMessageSize {self.config.max_message_size}")
            length = len(encode_properties(m.properties).encode())
            return refused(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                           f"message properties length {length} exceeds {MAX_PROPERTIES_LENGTH}")
        data, sizes = encoded
        if len(data) + BLANK_SIZE > self.commit_log.segment_size:
            return refused(
                PutStatus.MESSAGE_ILLEGAL,
                f"{len(data)} bytes of records do not fit in a CommitLog file of {self.commit_log.segment_size}",
            )
        return _Prepared(msgs, PendingPut(data, sizes, f"{topic}-{queue_id}", SysFlag.is_dispatched(msgs[0].sys_flag)))

    def _stored(self, prepared: "_Prepared", appended: Appended) -> AppendResult:
        """The result of a written put; its messages learn their offsets and store time."""
        msgs, put = prepared.msgs, prepared.put
        ids = place_records(msgs, put.record_sizes, appended.phys_offset,
                            appended.queue_offset if put.dispatched else -1, appended.store_timestamp, self._msg_id_prefix)
        return AppendResult(
            PutStatus.PUT_OK, appended.phys_offset, len(prepared.put.data), ids, appended.queue_offset, len(msgs),
            appended.store_timestamp,
        )  # fmt: skip

    def _flush_wait(self, result: AppendResult, msgs: Sequence[MessageExt], wait_flush: bool) -> AppendResult:
        """SYNC_FLUSH for a direct caller: wait for the fsync (or just ask for one, WAIT=false)."""
        if result.status is not PutStatus.PUT_OK or not self.config.sync_flush or not wait_flush:
            return result
        end = result.wrote_offset + result.wrote_bytes
        if all(m.wait_store_msg_ok for m in msgs):
            return self.flusher.wait_flushed(end, result)
        self.flusher.request_flush(end, None)
        return result

    # ------------------------------------------------------------ replication (store/replica.py)

    def replica_appender(self) -> ReplicaAppender:
        """A slave's writer of the bytes its master sends."""
        return ReplicaAppender(self.commit_log, self.appended_run)

    def truncate(self, offset: int) -> int:
        """Drop every record at and after ``offset`` from the CommitLog, and their ConsumeQueue
        and IndexFile entries the way recovery drops a torn tail (StoreRecovery.trim_to);
        returns the CommitLog's new end. A broker rejoining its group as a slave truncates
        back to the start of the first epoch it does not share with the new master."""
        self._check_running()
        with self._dispatch_lock:  # records held back and now cut never become consumable
            self._forget_undispatched_from(offset)
            self._visible_limit = None
        self.dispatch_pending()
        report = self.commit_log.truncate(offset)
        recovery = StoreRecovery(self.commit_log, self.queues, self.dispatcher, self.checkpoint, self.flusher,
                                 check_crc=False, abort_path=self.dir_lock.abort_path)
        with self.commit_log.lock:  # no put or replicated write sees queues half trimmed
            recovery.trim_to(report.end)
            self.commit_log.queue_offsets = self.queues.max_offsets()
            self.dispatcher.last_dispatched_ts = report.last_store_timestamp
        self.checkpoint.rewind(report.end, report.last_store_timestamp)
        self.flusher.flush_consume_queues()
        self._recount_timers()
        return report.end

    def _timer_real_topic(self, record: TimerRecord) -> str | None:
        """The real topic of a timer's CommitLog record (None: gone or unreadable)."""
        data = self.commit_log.read_record(record.phys)
        if data is None:
            return None
        try:
            return decode_record(data)[0].properties.get(Prop.REAL_TOPIC, "")
        except ValueError:
            return None

    def adopt_timers_fired(self, upto_ms: int) -> bool:
        """A slave: its master fired every timer before ``upto_ms`` (docs/timers.md#slaves); the
        pending counts drop the timers of the slots passed. Forward only; whether it moved."""
        return self.timers.adopt_fired(upto_ms, self._timer_real_topic)

    def _recount_timers(self) -> None:
        """Pending timers per real topic, counted again from the TimerLog and the CommitLog."""
        if self.timers is None:
            return
        pending = self.timers.recount(self._timer_real_topic)
        if pending:
            log.info("%d timers pending in %d topics", pending, len(self.timers.pending.by_topic()))

    def transfer_data(self, offset: int, limit: int) -> bytes | None:
        """A master: up to ``limit`` CommitLog bytes from ``offset`` for a slave (within one file)."""
        return read_for_transfer(self.commit_log, offset, limit)

    def request_flush(self, offset: int, done: FlushDone | None, acks: int = 1) -> None:
        """SYNC_FLUSH: call ``done(ok)`` once the CommitLog is fsynced up to ``offset`` (see StoreFlusher)."""
        self.flusher.request_flush(offset, done, acks)

    def count_flush_acks(self, acks: int) -> None:
        """Puts one fsync answered, counted by a caller that asked for it once for all of them."""
        self.flusher.count_flush_acks(acks)

    # ------------------------------------------------------------ disk guard (store/retention.py)

    @property
    def writable(self) -> bool:
        return self._running and self.disk_guard.full_reason is None

    def service_unavailable_remark(self, reason: str) -> str:
        return self.disk_guard.unavailable_remark(reason)

    # ------------------------------------------------------------ reading

    def _check_running(self) -> None:
        if not self._running:
            raise StoreNotRunningError("message store is not running")

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
        *,
        hot_only: bool = False,
        nowait: bool = False,
    ) -> GetResult | None:
        """A pull: statuses and nextBeginOffset as RocketMQ 4.9 (docs/wire-format.md#pull-statuses).

        ``tag_filter`` gets each entry's raw tagsCode (i64) and says whether it matches;
        ``record_filter`` then each read record (SQL92 on its properties). Messages either
        filter leaves out still advance nextBeginOffset.
        ``group`` is accepted for parity with RocketMQ (it only feeds its statistics).
        ``hot_only``: read no record outside the CommitLog's in-memory window; None instead
        when the first one is (the caller reads again where a cold read may block).
        ``nowait``: read only from the page cache; NotCached when part of what the pull reads is
        on disk (the ConsumeQueue entries or the records), before anything is consumed.
        """
        self._check_running()
        cq = self.queues.get(topic, queue_id)
        if cq is None:  # RocketMQ creates an empty queue on lookup; it reads as NO_MESSAGE_IN_QUEUE
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            # RocketMQ 4.x sends the consumer back to the start when nothing was ever deleted.
            nxt = min_offset if min_offset == 0 else max_offset
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)
        return self._read_queue(cq, offset, max_msg_nums, tag_filter, min_offset, max_offset, record_filter, hot_only,
                                nowait)

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None,
        min_offset: int,
        max_offset: int,
        record_filter: Callable[[bytes], bool] | None = None,
        hot_only: bool = False,
        nowait: bool = False,
    ) -> GetResult | None:
        cl = self.commit_log
        max_phy, cl_min, window = cl.max_offset, cl.min_offset, self.in_memory_window
        scan_entries = max(MAX_FILTER_SCAN_BYTES, max_msg_nums * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE
        # Without a tag filter the common pull takes at most max_msg_nums entries and looks at the
        # next: those are read first, the whole scan window only if the general scan needs it.
        first_read = min(scan_entries, max_msg_nums + 1) if tag_filter is None else scan_entries
        data = cq.read_entries(offset, first_read, nowait=nowait)
        if data is None:  # the ConsumeQueue file holding offset is gone
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset)
        first_phys = CQ_ENTRY.unpack_from(data)[0] if data else -1
        first_in_memory = bool(data) and max_phy - first_phys <= window
        if hot_only and data and not first_in_memory:
            return None
        fast = tag_filter is None and first_in_memory and first_phys >= cl_min
        if not fast and first_read < scan_entries and len(data) == first_read * CQ_ENTRY_SIZE:
            data = cq.read_entries(offset, scan_entries, nowait=nowait)  # (cold or removed records: scan as far as RocketMQ does)
            if data is None:
                return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset)
        if fast:
            # The common pull (a queue's entries ascend, so the first decides): nothing to filter,
            # nothing removed, every record in the page cache.
            status = GetStatus.FOUND
            picked, scanned, last_phys = self._pick_in_memory(data, max_msg_nums)
            # In the page cache: copied out of the CommitLog's mapping, only the records themselves
            # (a caller that cannot wait for the disk asks the page cache first: one call).
            joined = cl.read_joined(picked, nowait=nowait) if record_filter is None else None
        else:
            status, picked, scanned, last_phys = self._pick(data, max_msg_nums, tag_filter, max_phy, cl_min, window)
            joined = None

        records: Sequence[bytes] = joined if joined is not None else (
            [r for r in cl.read_many(picked, nowait=nowait) if r is not None] if picked else [])
        if picked and not records:  # deleted between the checks above and the read
            status = GetStatus.MESSAGE_WAS_REMOVING
        elif records and record_filter is not None:
            records = [r for r in records if record_filter(r)]
            if not records:
                status = GetStatus.NO_MATCHED_MESSAGE
        fall_behind = max_phy - last_phys
        return GetResult(
            status,
            offset + scanned,
            min_offset,
            max_offset,
            records,
            suggest_pull_from_slave=fall_behind > window,
            first_store_timestamp=record_store_timestamp(joined.data if joined is not None else records[0]) if records else 0,
            fall_behind_bytes=fall_behind,
        )

    def _pick(self, data: bytes, max_msg_nums: int, tag_filter: Callable[[int], bool] | None, max_phy: int,
              cl_min: int, window: int) -> tuple[GetStatus, list[tuple[int, int]], int, int]:
        """Which of the ConsumeQueue entries in ``data`` a pull answers with: (status, the picked
        (CommitLog offset, size) pairs, entries scanned, the CommitLog offset of the last entry looked at)."""
        status = GetStatus.NO_MATCHED_MESSAGE
        picked: list[tuple[int, int]] = []
        picked_bytes = 0
        skip_below = -1  # after a removed record, skip the rest of its CommitLog file
        last_phys = 0
        scanned = len(data) // CQ_ENTRY_SIZE
        for i, (phys, size, tags_code) in enumerate(CQ_ENTRY.iter_unpack(data)):
            last_phys = phys
            if phys < skip_below:
                continue
            if picked and self._batch_full(len(picked), picked_bytes, size, max_msg_nums, max_phy - phys > window):
                scanned = i
                break
            if tag_filter is not None and not tag_filter(tags_code):
                if not picked:
                    status = GetStatus.NO_MATCHED_MESSAGE
                continue
            if phys < cl_min:
                if not picked:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                skip_below = self.commit_log.roll_next_file(phys)
                continue
            picked.append((phys, size))
            picked_bytes += size
            status = GetStatus.FOUND
            skip_below = -1
        return status, picked, scanned, last_phys

    def _pick_in_memory(self, data: bytes, max_msg_nums: int) -> tuple[list[tuple[int, int]], int, int]:
        """``_pick`` where no entry is filtered out or removed and every record is in memory: the
        first ones up to the in-memory batch limits (at least one)."""
        cfg = self.config
        total = len(data) // CQ_ENTRY_SIZE
        limit = max(1, min(total, max_msg_nums, cfg.max_transfer_count_on_message_in_memory))
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        picked: list[tuple[int, int]] = []
        picked_bytes = 0
        for phys, size, _ in CQ_ENTRY.iter_unpack(data[:limit * CQ_ENTRY_SIZE]):
            if picked and picked_bytes + size > max_bytes:
                break
            picked.append((phys, size))
            picked_bytes += size
        if len(picked) < total:  # the next entry is where the next pull starts
            return picked, len(picked), CQ_ENTRY.unpack_from(data, len(picked) * CQ_ENTRY_SIZE)[0]
        return picked, total, picked[-1][0]

    def _batch_full(self, count: int, total: int, size: int, max_msg_nums: int, on_disk: bool) -> bool:
        """RocketMQ's isTheBatchFull; only asked once the batch holds a message (one always goes)."""
        cfg = self.config
        if count >= max_msg_nums:
            return True
        if on_disk:  # not in the page cache: smaller batches
            max_bytes, max_count = cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk
        else:
            max_bytes, max_count = cfg.max_transfer_bytes_on_message_in_memory, cfg.max_transfer_count_on_message_in_memory
        return total + size > max_bytes or count >= max_count

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether the queue has its ConsumeQueue already (its first put creates files)."""
        return (topic, queue_id) in self.queues

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        """Physical offset of the queue's entry ``offset``, -1 if there is none."""
        entry = self._entry(topic, queue_id, offset)
        return entry[0] if entry else -1

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the queue's message at ``offset``, -1 if there is none."""
        entry = self._entry(topic, queue_id, offset)
        return self.commit_log.store_timestamp(entry[0]) if entry else -1

    def _entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        self._check_running()
        cq = self.queues.get(topic, queue_id)
        return cq.entry(offset) if cq else None

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The queue offset whose store time equals ``timestamp``, else the nearer of the two
        neighbours (the earlier on a tie). Binary search over the whole queue, clamped to
        [min, max]; an empty or unknown queue answers its min offset (0)."""
        self._check_running()
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.search_offset(timestamp, self.commit_log.min_offset, self.commit_log.store_timestamp)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """QUERY_MESSAGE: records indexed under ``topic#key`` stored within [begin, end] ms,
        at most min(max_num, maxMsgsNumBatch), oldest first (RocketMQ's queryMessage)."""
        self._check_running()
        result = QueryMessageResult()
        if self.index is None:
            return result
        last_query_time = end
        for _ in range(3):
            found = self.index.query_offsets(topic, key, max_num, begin, last_query_time)
            if not found.phy_offsets:
                break
            result.index_last_update_timestamp = found.index_last_update_timestamp
            result.index_last_update_phyoffset = found.index_last_update_phyoffset
            for i, phys in enumerate(sorted(set(found.phy_offsets))):
                record = self.commit_log.read_record(phys)
                if record is None:  # deleted by retention (or never written: a refused put)
                    continue
                if not self._lookup_allowed(phys, record):
                    continue
                if i == 0:
                    last_query_time = record_store_timestamp(record)
                result.records.append(record)
            if result.records or last_query_time < begin:
                break
        return result

    def look_message_by_offset(self, phys_offset: int) -> bytes | None:
        """The raw record at ``phys_offset`` (VIEW_MESSAGE_BY_ID, send-back), None if none starts there."""
        self._check_running()
        record = self.commit_log.read_record(phys_offset)
        return record if record is not None and self._lookup_allowed(phys_offset, record) else None

    def is_in_memory(self, phys_offset: int) -> bool:
        """Whether the record is near enough the CommitLog head to be in the page cache."""
        return self.commit_log.max_offset - phys_offset <= self.in_memory_window

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def flushed_phy_offset(self) -> int:
        """Where the CommitLog is fsynced up to (SYNC_FLUSH's group commit moves it)."""
        return self.commit_log.flushed_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def topic_queue_ids(self) -> dict[str, list[int]]:
        """Queues that exist on disk (or were created since load), by topic."""
        return self.queues.topic_queue_ids()

    # ------------------------------------------------------------ flushing and retention

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """fsync the CommitLog (if ``least_pages`` pages are dirty); returns the durable offset."""
        return self.flusher.flush_commit_log(least_pages)

    def flush_commit_log_timed(self) -> int:
        return self.flusher.flush_commit_log_timed()

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        self.flusher.flush_consume_queues(least_pages)

    def flush_consume_queues_timed(self) -> None:
        self.flusher.flush_consume_queues_timed()

    def flush(self) -> None:
        self.dispatch_pending()
        self.flush_commit_log()
        self.flush_consume_queues()

    def clean(self, now_ms: int | None = None) -> CleanResult:
        """One retention run (expired files, fired TimerLog files, disk guard); the broker calls it
        every cleanResourceInterval."""
        self._check_running()
        return self.clean_service.run(now_ms)
