"""Flushing the store: SYNC_FLUSH's group commit, ASYNC_FLUSH's timed flushes, and the
checkpoint that follows both.

Group commit (RocketMQ's GroupCommitService): puts append in the writer thread and never fsync there. Each put that must wait for the
disk registers (its end offset, a callback) here; one flush thread loops: take every
waiting request, fsync once (which covers everything written so far, so at least each
taken request), call back all of them. Sends that arrive while an fsync runs share the
next one, so under load many acknowledgements ride on each fsync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferrymq.store.results import AppendResult, PutStatus

if TYPE_CHECKING:
    from ferrymq.store.checkpoint import StoreCheckpoint
    from ferrymq.store.commit_log import CommitLog
    from ferrymq.store.config import StoreConfig
    from ferrymq.store.dispatch import ConsumeQueueTable, Dispatcher
    from ferrymq.store.index_service import IndexService

log = logging.getLogger(__name__)

FlushDone = Callable[[bool], None]  # called with True once fsynced, False if the fsync failed


@dataclass
class GroupCommitStats:
    fsyncs: int = 0
    acks: int = 0  # puts answered by those fsyncs (including ones an fsync covered before they asked)
    largest_group: int = 0

    @property
    def acks_per_fsync(self) -> float:
        return self.acks / self.fsyncs if self.fsyncs else 0.0

    def count(self, acks: int) -> None:
        """``acks`` puts answered by one fsync (under the service's lock)."""
        self.acks += acks
        self.largest_group = max(self.largest_group, acks)


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], flushed_offset: Callable[[], int], name: str = "store-group-commit") -> None:
        self._flush = flush  # fsyncs what is written, returns the offset now durable
        self._flushed_offset = flushed_offset
        self._cond = threading.Condition()
        self._requests: list[tuple[int, FlushDone, int]] = []  # (offset, done, puts it answers)
        self._wakeup = False
        self._stopping = False
        self.stats = GroupCommitStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, offset: int, done: FlushDone, acks: int = 1) -> None:
        """Call ``done`` once everything below ``offset`` is fsynced (at once if it already is).
        ``acks``: how many puts the request answers, for the statistics (0: the caller counts
        them itself with ``count_acks``, when it knows)."""
        if self._flushed_offset() >= offset:  # an fsync that ran meanwhile covered it
            with self._cond:
                self.stats.acks += acks
            done(True)
            return
        with self._cond:
            if self._stopping:
                immediate = True
            else:
                immediate = False
                self._requests.append((offset, done, acks))
                self._cond.notify()
        if immediate:
            done(self._flushed_offset() >= offset)

    def count_acks(self, acks: int) -> None:
        """Puts answered by one fsync, counted by a caller that grouped them itself."""
        with self._cond:
            self.stats.count(acks)

    def wakeup(self) -> None:
        """Flush soon without anyone waiting (a SYNC_FLUSH message sent with WAIT=false)."""
        with self._cond:
            self._wakeup = True
            self._cond.notify()

    def stop(self) -> None:
        """Answer every waiting request (after one last fsync) and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self._wakeup and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._requests:
                    return
                batch, self._requests, self._wakeup = self._requests, [], False
            try:
                durable = self._flush()
                ok = True
            except OSError as exc:  # the bytes may not be on disk: say so to every waiter
                log.error("CommitLog fsync failed: %s", exc)
                durable, ok = -1, False
            with self._cond:
                self.stats.fsyncs += 1
                acks = sum(n for _, _, n in batch)
                if acks:
                    self.stats.count(acks)
            for offset, done, _ in batch:
                try:
                    done(ok and durable >= offset)
                except Exception:  # a waiter's callback must not stop the flush thread
                    log.exception("group commit callback failed")


def settle_flush_wait(result: AppendResult, timeout_ms: int, ok: bool | None) -> AppendResult:
    """The answer to a SYNC_FLUSH put after waiting for its fsync (the message is stored
    either way): ``ok`` None means syncFlushTimeout passed, False that the fsync failed."""
    if ok is None:
        result.status = PutStatus.FLUSH_DISK_TIMEOUT
        result.remark = f"wait for flush timeout: not fsynced within syncFlushTimeout {timeout_ms} ms"
    elif not ok:
        result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, "the fsync of the CommitLog failed"
    return result


class StoreFlusher:
    """Flushes the CommitLog, the ConsumeQueues and the IndexFiles and moves the checkpoint
    after them: on ASYNC_FLUSH's timers (RocketMQ's FlushRealTimeService and
    FlushConsumeQueueService), in the group-commit thread for SYNC_FLUSH, and at shutdown."""

    def __init__(self, config: "StoreConfig", commit_log: "CommitLog", queues: "ConsumeQueueTable",
                 index: "IndexService | None", dispatcher: "Dispatcher") -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.checkpoint: StoreCheckpoint | None = None  # attached once the store has opened it
        self.group_commit: GroupCommitService | None = None
        self._last_thorough: dict[str, float] = {}  # monotonic ms of each kind's last full flush
        self._timed_lock = threading.Lock()

    # ------------------------------------------------------------ SYNC_FLUSH

    def start_group_commit(self) -> None:
        self.group_commit = GroupCommitService(self._group_flush, lambda: self.commit_log.flushed_offset)
        self.group_commit.start()

    def stop_group_commit(self) -> None:
        if self.group_commit is None:
            return
        self.group_commit.stop()
        stats = self.group_commit.stats
        log.info("group commit: %d acknowledgement(s) over %d fsync(s) (%.1f per fsync, largest group %d)",
                 stats.acks, stats.fsyncs, stats.acks_per_fsync, stats.largest_group)

    def request_flush(self, offset: int, done: FlushDone | None, acks: int = 1) -> None:
        """SYNC_FLUSH: call ``done(ok)`` once the CommitLog is fsynced up to ``offset``; with
        ``done`` None just have it flushed soon (WAIT=false). Concurrent requests share fsyncs.
        ``acks``: the puts the request answers, for the statistics (0: counted with ``count_flush_acks``)."""
        gc = self.group_commit
        if gc is None:
            if done is not None:
                done(self.commit_log.flushed_offset >= offset)
        elif done is None:
            gc.wakeup()
        else:
            gc.request(offset, done, acks)

    def count_flush_acks(self, acks: int) -> None:
        """Puts one fsync answered, for a caller that grouped them behind one request."""
        if self.group_commit is not None:
            self.group_commit.count_acks(acks)

    def wait_flushed(self, offset: int, result: AppendResult) -> AppendResult:
        """Block until an fsync covers ``offset`` or syncFlushTimeout passes (direct callers;
        the broker waits on its event loop instead)."""
        timeout_ms = self.config.sync_flush_timeout
        if timeout_ms <= 0 and self.commit_log.flushed_offset < offset:
            self.request_flush(offset, None)  # no time to wait at all: just have it flushed soon
            return settle_flush_wait(result, timeout_ms, None)
        flushed = threading.Event()
        outcome = [False]

        def done(ok: bool) -> None:
            outcome[0] = ok
            flushed.set()

        self.request_flush(offset, done)
        return settle_flush_wait(result, timeout_ms, outcome[0] if flushed.wait(timeout_ms / 1000) else None)

    def _group_flush(self) -> int:
        """The group-commit thread's fsync; the checkpoint follows it."""
        offset, store_ts = self.commit_log.flush()
        if self.checkpoint is not None:
            self.checkpoint.commit_log_flushed(offset, store_ts)
        return offset

    # ------------------------------------------------------------ ASYNC_FLUSH and shutdown

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """fsync the CommitLog (if ``least_pages`` pages are dirty); returns the durable offset."""
        flushed = self.commit_log.flush(least_pages)
        if flushed is not None and self.checkpoint is not None:
            self.checkpoint.commit_log_flushed(*flushed)
        return self.commit_log.flushed_offset

    def flush_commit_log_timed(self) -> int:
        """ASYNC_FLUSH's timer: flush when at least flushCommitLogLeastPages pages are dirty,
        and everything every flushCommitLogThoroughInterval. Returns the durable offset."""
        cfg = self.config
        return self.flush_commit_log(self._pages_due("commitlog", cfg.flush_commit_log_least_pages,
                                                     cfg.flush_commit_log_thorough_interval))

    def _pages_due(self, kind: str, least_pages: int, thorough_interval_ms: int) -> int:
        """``least_pages``; 0 (flush everything) when ``kind``'s last full flush is that old."""
        with self._timed_lock:
            now = time.monotonic() * 1000
            last = self._last_thorough.get(kind)
            if last is None or now - last >= thorough_interval_ms:
                self._last_thorough[kind] = now
                return 0
        return least_pages

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """fsync ConsumeQueues (and, for a full flush, IndexFiles) and move the checkpoint."""
        logics_ts = self.dispatcher.last_dispatched_ts  # read first: the flushes below cover at least this
        index_ts = self.index.last_indexed_timestamp if self.index is not None else 0
        self.queues.flush(least_pages)
        if self.index is not None:
            self.index.flush(durable=least_pages == 0)
        if self.dispatcher.timers is not None:
            self.dispatcher.timers.sync()
            if self.checkpoint is not None:  # kept outside timer/ too (docs/timers.md#a-lost-timer-directory)
                self.checkpoint.timers_fired(self.dispatcher.timers.checkpoint()[0])
        if least_pages == 0 and self.checkpoint is not None:
            self.checkpoint.logics_flushed(logics_ts, index_ts or logics_ts)

    def flush_consume_queues_timed(self) -> None:
        """The ConsumeQueue timer: flushConsumeQueueLeastPages, and a full flush (IndexFiles
        and checkpoint too) every flushConsumeQueueThoroughInterval."""
        cfg = self.config
        self.flush_consume_queues(self._pages_due("consumequeue", cfg.flush_consume_queue_least_pages,
                                                  cfg.flush_consume_queue_thorough_interval))
