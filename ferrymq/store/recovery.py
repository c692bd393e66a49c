"""Recovery at load (docs/wire-format.md#checkpoint, #abort-marker-and-lock): RocketMQ's normal and abnormal CommitLog recovery.

After a clean exit (no ``abort`` file) only the tail of the last CommitLog file is walked,
from the end of the newest ConsumeQueue entry. After an unclean one, every record from the
last file older than the checkpoint on is validated (magic code, length, field layout, body
CRC); the first invalid one ends the CommitLog (logged with its offset, everything after it
dropped); ConsumeQueues and IndexFiles are trimmed to the CommitLog and records newer than
the checkpoint are dispatched to them again in the same pass. A ConsumeQueue found missing
older entries is rebuilt whole from the CommitLog. A timing store that lost its directory is
indexed again from the timer topic's ConsumeQueue (docs/timers.md#a-lost-timer-directory).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ferrymq.common.message import MessageExt, SysFlag, decode_record, record_store_timestamp
from ferrymq.common.protocol import TIMER_TOPIC
from ferrymq.store.commit_log import CommitLog, RecoveryReport
from ferrymq.store.consume_queue import CQ_ENTRY, ConsumeQueueGapError
from ferrymq.store.dispatch import ConsumeQueueTable, Dispatcher, timer_entries

if TYPE_CHECKING:
    from ferrymq.store.checkpoint import StoreCheckpoint
    from ferrymq.store.flush import StoreFlusher

log = logging.getLogger(__name__)

_REBUILD_BATCH = 1024  # ConsumeQueue entries read at a time when a timing store is rebuilt


class StoreRecovery:
    """Brings the ConsumeQueues, IndexFiles and checkpoint of a store just opened in line with
    its CommitLog. Every part is handed in; ``run`` returns what it found."""

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueTable, dispatcher: Dispatcher,
                 checkpoint: "StoreCheckpoint", flusher: "StoreFlusher", *, check_crc: bool, abort_path: str) -> None:
        self.commit_log = commit_log
        self.queues = queues
        self.dispatcher = dispatcher
        self.index = dispatcher.index
        self.checkpoint = checkpoint
        self.flusher = flusher
        self.check_crc = check_crc
        self.abort_path = abort_path

    def run(self, clean: bool) -> RecoveryReport:
        """Recover; ``clean``: the last run shut down cleanly. Returns the CommitLog's report."""
        cl, index, checkpoint = self.commit_log, self.index, self.checkpoint
        segments = cl.segments
        started = time.monotonic()
        if index is not None:
            index.undo_unfinished()
        if clean:
            # Every file but the last was finished with a blank record before the next began,
            # and the last ConsumeQueue entry ends on a record boundary: walk on from there.
            last_entry_end = self._last_entry_end()
            report = cl.recover(start_index=len(segments) - 1, check_crc=False, start_at=last_entry_end)
            if report.last_store_timestamp == 0 and last_entry_end > 0:
                report.last_store_timestamp = self._last_entry_store_time()
            redispatch = None
        else:
            start_index = self._abnormal_start_index()
            log.warning("the store was not shut down cleanly (%s exists): checking the CommitLog from file %d of %d "
                        "(checkpoint: physic %d, logics %d, index %d)", self.abort_path, start_index + 1,
                        len(segments), checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                        checkpoint.index_msg_timestamp)
            # One pass: validate each record and bring ConsumeQueues and IndexFiles up to date with it.
            redispatch = _Redispatch(self)
            report = cl.recover(start_index=start_index, check_crc=self.check_crc, on_record=redispatch)
        end = report.end
        self.trim_to(end)
        if redispatch is None:
            # After a clean exit the queues are complete; only a lost ConsumeQueue or IndexFile
            # directory needs records dispatched again.
            start = max(max((cq.max_phys_end for cq in self.queues), default=0), cl.min_offset)
            index_after = index.indexed_end if index is not None else -1
            if index is not None and not index.files and cl.max_offset > cl.min_offset:
                start, index_after = cl.min_offset, -1
            dispatched = self._replay(start, end, index_after)
        else:
            dispatched = redispatch.dispatched
            if redispatch.gap is not None:
                self._rebuild_consume_queues(redispatch.gap, end)
        if dispatched or not clean:
            log.info("recovery: CommitLog valid up to offset %d (%d record(s) checked from offset %d), %d record(s) "
                     "dispatched again to ConsumeQueues / IndexFiles, in %.2f s", end, report.records_checked,
                     report.walked_from, dispatched, time.monotonic() - started)
        for cq in self.queues:
            cq.correct_min_offset(cl.min_offset)
        cl.queue_offsets = self.queues.max_offsets()
        self.dispatcher.last_dispatched_ts = report.last_store_timestamp
        timers = self.dispatcher.timers
        if timers is not None and timers.lost:
            self._rebuild_timers(end)
        if not clean:
            # What a crashed process wrote may not be on disk yet: make it so before taking new
            # writes, so the checkpoint (and every later flushed offset) tells the truth.
            cl.sync_from(report.walked_from)
            checkpoint.commit_log_flushed(end, report.last_store_timestamp)
            self.flusher.flush_consume_queues()
        return report

    def trim_to(self, end: int) -> None:
        """ConsumeQueues, IndexFiles and the checkpoint forget every record at or past ``end``
        (the CommitLog's end): after a recovery walk, and after a truncation of the CommitLog
        (a broker rejoining its group as a slave drops what it wrote after the epoch it shares
        with the new master, MessageStore.truncate)."""
        cl, index = self.commit_log, self.index
        for cq in self.queues:
            cq.truncate_beyond(end)  # entries for records the CommitLog no longer has
        if index is not None:
            index.truncate_beyond(end, lambda phys: max(0, cl.store_timestamp(phys)))
        if self.dispatcher.timers is not None:
            self.dispatcher.timers.truncate_phys(end)
        if self.checkpoint.physic_flushed_offset > end:
            self.checkpoint.reset_flushed_offset(end)

    def _last_entry_end(self) -> int:
        """End of the newest record a ConsumeQueue points at, if that record is intact; else 0."""
        newest = self.queues.newest()
        entry = newest.entry(newest.max_offset - 1) if newest is not None else None
        if entry is None or not self.commit_log.has_record(entry[0], entry[1]):
            return 0
        return entry[0] + entry[1]

    def _last_entry_store_time(self) -> int:
        """Store time of the newest record any ConsumeQueue points at (0 if none is readable)."""
        newest = self.queues.newest()
        entry = newest.entry(newest.max_offset - 1) if newest is not None else None
        return max(0, self.commit_log.store_timestamp(entry[0])) if entry else 0

    def _rebuild_consume_queues(self, reason: str, end: int) -> None:
        """Entries older than the checkpoint are missing too (a lost or damaged file): build
        every ConsumeQueue again from the whole CommitLog."""
        log.warning("%s; rebuilding every ConsumeQueue from the CommitLog", reason)
        self.queues.reset()
        index_after = self.index.indexed_end if self.index is not None else -1
        self._replay(self.commit_log.min_offset, end, index_after)

    def _rebuild_timers(self, end: int) -> None:
        """The timing store lost its directory: index every timer record the timer topic's
        ConsumeQueue (complete by now) points at, except those fired before the loss."""
        timers = self.dispatcher.timers
        timers.begin_rebuild(end)
        queue = self.queues.get(TIMER_TOPIC, 0)
        if queue is None:
            return
        offset, added = queue.min_offset, 0
        while offset < queue.max_offset:
            raw = queue.read_entries(offset, _REBUILD_BATCH)
            if not raw:
                break
            entries = [(phys, size) for phys, size, _ in CQ_ENTRY.iter_unpack(raw) if phys >= self.commit_log.min_offset]
            offset += len(raw) // CQ_ENTRY.size
            batch: list[tuple] = []
            markers: set[int] = set()  # recall markers (docs/timers.md#recall)
            for (phys, size), record in zip(entries, self.commit_log.read_many(entries)):
                if record is None:
                    continue  # removed by retention meanwhile
                try:
                    msg, _ = decode_record(record)
                except ValueError as e:
                    log.error("timer record at CommitLog offset %d is unreadable (%s): not indexed again", phys, e)
                    continue
                batch += timer_entries([msg], [size], phys, markers)
            added += timers.add(batch, markers)
        log.warning("the timer directory was lost: %d pending timer(s) indexed again from the CommitLog "
                    "(fired up to %d)", added, timers.fired_ms)

    def _abnormal_start_index(self) -> int:
        """The last CommitLog file whose first record is older than what the checkpoint says
        is on disk everywhere (RocketMQ's isMappedFileMatchedRecover); the first file if none."""
        cp = self.checkpoint
        min_ts = cp.min_timestamp_index() if self.index is not None else cp.min_timestamp()
        segments = self.commit_log.segments
        for i in range(len(segments) - 1, -1, -1):
            first_ts = self.commit_log.first_store_timestamp(segments[i])
            if 0 < first_ts <= min_ts:
                return i
        return 0

    def _replay(self, start: int, end: int, index_after: int) -> int:
        """Dispatch CommitLog records in [start, end) again: ConsumeQueue entries a queue
        already has are skipped, index keys only for records past ``index_after``."""
        count = 0
        partial = start > self.commit_log.min_offset  # records before ``start`` are not looked at
        try:
            for phys, record in self.commit_log.iter_records(start, end):
                m, _ = decode_record(record)
                self.dispatch_again(m, phys, partial)
                if self.index is not None and phys > index_after:
                    self.dispatcher.index_record(m, phys, m.store_timestamp)
                    index_after = phys
                count += 1
        except ConsumeQueueGapError as exc:
            self._rebuild_consume_queues(str(exc), end)
        return count

    def dispatch_again(self, m: MessageExt, phys: int, partial: bool) -> None:
        """A record's ConsumeQueue entry (if it has none yet). ``partial``: older records were
        not looked at, so a queue first seen here above offset 0 has lost entries."""
        if not SysFlag.is_dispatched(m.sys_flag):
            return
        if partial and m.queue_offset > 0 and (m.topic, m.queue_id) not in self.queues:
            raise ConsumeQueueGapError(f"{m.topic}-{m.queue_id}: no ConsumeQueue on disk, but the CommitLog "
                                       f"has its record for offset {m.queue_offset}")
        self.dispatcher.record_entry(m, phys)


class _Redispatch:
    """Abnormal recovery's per-record step, run as the CommitLog walk validates each record.

    A record stored before the checkpoint's logics (and index) time is already in its
    ConsumeQueue (and IndexFile) on disk: it is skipped without being decoded. Any other is
    decoded and dispatched; a ConsumeQueue that already has its entry ignores it, the
    IndexFiles take only records past the last one they indexed."""

    def __init__(self, recovery: StoreRecovery) -> None:
        self.recovery = recovery
        self.index = recovery.index
        cp = recovery.checkpoint
        self.logics_safe = cp.min_timestamp()
        self.index_safe = cp.min_timestamp_index()
        self.index_after = self.index.indexed_end if self.index is not None else -1
        # Records before the checkpoint are skipped unread, so a queue that first shows up here
        # at an offset above 0 may have lost older entries: that always means a full rebuild.
        self.partial = True
        self.dispatched = 0
        self.gap: str | None = None  # set when a ConsumeQueue turns out to miss older entries

    def __call__(self, phys: int, chunk: bytes, pos: int, size: int) -> None:
        store_ts = record_store_timestamp(chunk, pos)
        need_index = self.index is not None and phys > self.index_after
        need_queue = self.gap is None and store_ts > self.logics_safe
        if not need_queue and not (need_index and store_ts > self.index_safe):
            return
        m, _ = decode_record(chunk[pos : pos + size])
        if need_queue:
            try:
                self.recovery.dispatch_again(m, phys, self.partial)
            except ConsumeQueueGapError as exc:
                self.gap = str(exc)  # stop dispatching; the queues are rebuilt after the walk
        if need_index:
            self.recovery.dispatcher.index_record(m, phys, store_ts)
            self.index_after = phys
        self.dispatched += 1
