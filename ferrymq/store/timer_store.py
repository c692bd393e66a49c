"""The timing store (docs/timers.md): the TimerLog, the TimerWheel and the timer checkpoint,
kept consistent with each other across crashes. Synchronous and thread-safe (one lock); the
broker's timer service reaches it only through the store's worker threads.

Two cursors move through time:
- ``taken_ms``: slots before it have been handed to the timer service (in memory only). A new
  timer due before it is linked into the slot at ``taken_ms``, so it is never put behind the
  reader.
- ``fired_ms``: slots before it have been delivered (the checkpoint). After a restart reading
  resumes there: a slot taken but not yet recorded as fired is taken again (at-least-once).
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ferrymq.store.mapped_file import fdatasync
from ferrymq.store.timer_log import NO_RECORD, RECALL_MARKER, RECORD_SIZE, TimerLog, TimerRecord
from ferrymq.store.timer_pending import PendingTimers
from ferrymq.store.timer_wheel import EMPTY_SLOT, SLOT_SIZE, Slot, TimerWheel

_CHECKPOINT = struct.Struct(">qq")  # firedUpToMs, synced TimerLog position
# Slots changed since the last sync are kept in memory; the flush thread syncs them every
# ConsumeQueue flush (a second). Past this many (timers at 32 000 distinct seconds between two
# flushes: a stalled disk; about 10 MB), dispatch syncs at once itself.
MAX_DIRTY_SLOTS = 32_768
DEFAULT_LOG_SEGMENT_SIZE = RECORD_SIZE * 1024 * 1024  # 48 MiB, 1 048 576 records


class TakenSlot(NamedTuple):
    """Part of a due slot's timers, in arrival order (``TimerStore.take``)."""

    slot_ms: int
    records: list[TimerRecord]
    markers: list[TimerRecord]  # the whole slot's recall markers (docs/timers.md#recall), in every part
    last: bool  # the slot's last part: only then may it count as fired


@dataclass
class _SlotCursor:
    """A slot being taken part by part: where its records are (8 bytes each), how far it got."""

    slot_ms: int
    positions: array
    markers: list[TimerRecord] = field(default_factory=list)
    next: int = 0


class TimerStore:
    def __init__(self, directory: str, *, precision_ms: int = 1000, max_delay_sec: int = 259_200,
                 log_segment_size: int = DEFAULT_LOG_SEGMENT_SIZE, roll_window_slots: int | None = None) -> None:
        slot_count = 2 * max_delay_sec * 1000 // precision_ms
        self.directory = directory
        self.precision_ms = precision_ms
        # docs/timers.md#retention: a timer due more than this many slots after its record was
        # stored is filed earlier and stored again then; a window of half the wheel (the longest
        # delay) or more rolls nothing (None)
        self.roll_window_slots = roll_window_slots if roll_window_slots and roll_window_slots < slot_count // 2 else None
        self.log = TimerLog(os.path.join(directory, "log"), log_segment_size)
        self.wheel = TimerWheel(os.path.join(directory, "wheel"), slot_count, precision_ms)
        self._lock = threading.Lock()
        # Held by a sync from start to end, and by whatever closes or cuts files (truncation,
        # retention, close), so that neither happens between a sync's steps; taken before _lock.
        self._sync_lock = threading.Lock()
        self._checkpoint_fd = -1
        self.fired_ms = 0
        self.taken_ms = 0
        self._taking: _SlotCursor | None = None  # a slot handed out in parts, not all taken yet
        self.synced_pos = 0
        self._checkpoint_dirty = False
        self.pending = PendingTimers(precision_ms)  # per real topic (operator views)
        self.lost = False  # opened without its checkpoint: to be rebuilt from the CommitLog
        # A rebuild's bounds: a record below this CommitLog offset filed in a slot before
        # ``_rebuild_floor`` was fired before the loss, and is not indexed again.
        self._rebuild_below = 0
        self._rebuild_floor = 0
        # Retention (docs/timers.md#retention): TimerLog records before this position are fired;
        # it only moves forward, save a truncation or a rebuild, so finding the oldest unfired
        # timer costs one read per record over the log's life.
        self._unfired_from = 0

    # ------------------------------------------------------------ open / close

    def open(self, now_ms: int, *, fired_floor_ms: int = 0) -> None:
        """Open (or create) the files and bring the wheel up to the TimerLog's last whole record.
        ``fired_floor_ms``: the fired-up-to time as last copied outside this directory (0: none).
        A store without its checkpoint starts firing there, else at ``now_ms`` rounded down, and
        is ``lost``: the caller rebuilds it (``begin_rebuild``)."""
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, "checkpoint")
        existed = os.path.exists(path)
        self._checkpoint_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._checkpoint_fd, _CHECKPOINT.size, 0)
        if existed and len(data) == _CHECKPOINT.size:
            self.fired_ms, self.synced_pos = _CHECKPOINT.unpack(data)
            self.fired_ms = max(self.fired_ms, fired_floor_ms)
        else:
            self.fired_ms, self.synced_pos = fired_floor_ms or self.wheel.round_down(now_ms), 0
            self.lost = True
        self.taken_ms = self.fired_ms
        self.log.open()
        self.wheel.open()
        if self.log.end < self.synced_pos:  # synced records lost (the files were cut): rebuild
            self.wheel.reset()
            self._relink(self.log.min_position)
        else:
            self._relink(self.synced_pos)
        self._write_checkpoint()

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._checkpoint_fd < 0:
                return
            self._sync()
            self.log.close()
            self.wheel.close()
            os.close(self._checkpoint_fd)
            self._checkpoint_fd = -1

    def _relink(self, begin: int) -> None:
        """Records after the last sync: each slot ends as its newest record there says."""
        for pos, record in self.log.records(begin):
            self.wheel.put(record.slot_ms, Slot(record.slot_ms, pos, record.slot_seq))

    # ------------------------------------------------------------ dispatch side

    @property
    def dispatched_phys_end(self) -> int:
        """CommitLog offset just past the newest timer record indexed (0: none)."""
        last = self.log.last()
        return last.phys + last.size if last is not None else 0

    def begin_rebuild(self, commit_log_end: int) -> None:
        """A lost store is indexed again from every timer record the CommitLog holds (they follow
        through ``add``): forget what a re-dispatch put here already, and skip the records before
        ``commit_log_end`` whose slot was fired before the loss (docs/timers.md#a-lost-timer-directory)."""
        self.truncate_phys(0)
        with self._lock:
            self._rebuild_below, self._rebuild_floor = commit_log_end, self.fired_ms
            self.lost = False

    def add(self, timers: Sequence[tuple], markers: Collection[int] = ()) -> int:
        """Index timer records ``(deliver_ms, commitlog_offset, size[, real_topic[, stored_ms]])``
        in CommitLog order, counting each under its real topic (``stored_ms``: the record's store
        time, for the roll window, ``filing_ms``). Records already indexed (below
        ``dispatched_phys_end``: a re-dispatch) are skipped, and so are those a rebuild finds
        fired. ``markers``: the CommitLog offsets of recall markers (flagged RECALL_MARKER, not
        counted as waiting; docs/timers.md#recall). Returns how many were added."""
        with self._lock:
            floor = self.dispatched_phys_end
            pos = self.log.end
            records: list[TimerRecord] = []
            for deliver_ms, phys, size, *rest in timers:
                if phys < floor:
                    continue
                filing_ms = self.filing_ms(deliver_ms, rest[1] if len(rest) > 1 else None)
                if phys < self._rebuild_below and filing_ms < self._rebuild_floor:
                    continue  # fired, or rolled: stored again later (docs/timers.md#retention)
                marker = phys in markers
                if not marker:
                    self.pending.add(rest[0] if rest else "", deliver_ms)
                records.append(self._link(deliver_ms, filing_ms, phys, size, pos, RECALL_MARKER if marker else 0))
                pos += RECORD_SIZE
                floor = phys + size
            if records:
                self.log.append(records)
                if self.wheel.dirty_count >= MAX_DIRTY_SLOTS:  # the flush thread fell far behind
                    self._sync()
            return len(records)

    def filing_ms(self, deliver_ms: int, stored_ms: int | None) -> int:
        """The slot a timer is filed under: its own, or, due more than the roll window after
        ``stored_ms`` (its CommitLog record's store time; None: not known, no window), the
        window's end, where it is stored again (Apache's roll: half the window when less than a
        third of it would be left for the next leg). So no CommitLog record of a timer gets older
        than the window before it is fired or copied."""
        ref, slots = stored_ms, self.roll_window_slots
        if ref is not None and slots is not None and deliver_ms - ref >= slots * self.precision_ms:
            if deliver_ms - ref - slots * self.precision_ms < slots // 3 * self.precision_ms:
                deliver_ms = ref + slots // 2 * self.precision_ms
            else:
                deliver_ms = ref + slots * self.precision_ms
        return self.wheel.round_down(deliver_ms)

    def _link(self, deliver_ms: int, filing_ms: int, phys: int, size: int, pos: int, flags: int) -> TimerRecord:
        slot_ms = max(filing_ms, self.taken_ms)
        slot = self.wheel.get(slot_ms)
        if slot.count > 0 and (slot.slot_ms == slot_ms or slot.slot_ms >= self.taken_ms):
            # the same second, or an older round not yet fired: chain behind it (docs/timers.md, rounds)
            record = TimerRecord(deliver_ms, phys, slot.last_pos, slot.slot_ms, size, slot.count + 1, flags)
        else:
            record = TimerRecord(deliver_ms, phys, NO_RECORD, slot_ms, size, 1, flags)
        self.wheel.put(record.slot_ms, Slot(record.slot_ms, pos, record.slot_seq))
        return record

    def truncate_phys(self, phys: int) -> int:
        """The CommitLog was cut at ``phys``: forget the timers at or past it, restoring each slot
        as its first forgotten record found it. Returns how many were forgotten."""
        with self._sync_lock, self._lock:
            if self._taking is not None:  # a slot in parts: taken again whole, from its first part
                self.taken_ms = min(self.taken_ms, self._taking.slot_ms)
                self._taking = None
            cut = self.log.first_at_or_after_phys(phys)
            restored: set[int] = set()
            removed = 0
            for _, record in self.log.records(cut):
                removed += 1
                index = self.wheel.index(record.slot_ms)
                if index in restored:
                    continue
                restored.add(index)
                before = record.slot_seq - 1
                self.wheel.put(record.slot_ms,
                               Slot(record.slot_ms, record.prev_pos, before) if before > 0 else EMPTY_SLOT)
            self.log.truncate(cut)
            self.synced_pos = min(self.synced_pos, cut)
            self._unfired_from = min(self._unfired_from, cut)
            self._sync()
            return removed

    def recount(self, topic_of: Callable[[TimerRecord], str | None]) -> int:
        """Count the timers not yet fired per real topic again, from the TimerLog (``topic_of``
        reads a record's real topic from the CommitLog; None: gone). At open and after a
        CommitLog truncation; one pass over the log. Returns how many are pending."""
        with self._lock:
            return self._recount(topic_of, self.fired_ms)

    def _recount(self, topic_of: Callable[[TimerRecord], str | None], fired_ms: int) -> int:
        self.pending.clear()
        count = 0
        for _, record in self.log.records(self.log.min_position):
            if record.slot_ms < fired_ms or record.flags & RECALL_MARKER:
                continue
            topic = topic_of(record)
            if topic is not None:
                self.pending.add(topic, record.deliver_ms, scheduled=False)
                count += 1
        return count

    # ------------------------------------------------------------ firing side

    def take(self, now_ms: int, max_records: int = 50_000) -> TakenSlot | None:
        """The next part (at most ``max_records``) of the next slot due by ``now_ms`` that holds
        timers, its records in arrival order; ``taken_ms`` moves past the slot when its first part
        is taken. None when nothing more is due (``taken_ms`` has then passed ``now_ms``'s slot).
        A slot is walked once for where its records are and which are recall markers, and read
        part by part: memory holds 8 bytes per timer of the slot, not the records. A chain may
        hold records of a later round (docs/timers.md, rounds): the caller stores those again."""
        with self._lock:
            if self._taking is None:
                due = self.wheel.round_down(now_ms)
                while self._taking is None:
                    if self.taken_ms > due:
                        return None
                    slot_ms = self.taken_ms
                    slot = self.wheel.get(slot_ms)
                    self.taken_ms = slot_ms + self.precision_ms
                    if slot.holds(slot_ms):
                        self._taking = self._walk(slot_ms, slot)
            part = self._taking
            end = min(part.next + max(1, max_records), len(part.positions))
            records = [r for r in self.log.read_many(part.positions[part.next:end]) if r is not None]
            part.next = end
            last = end >= len(part.positions)
            if last:
                self._taking = None
            return TakenSlot(part.slot_ms, records, part.markers, last)

    def _walk(self, slot_ms: int, slot: Slot) -> _SlotCursor:
        part = _SlotCursor(slot_ms, array("q"))
        # ends early below the log's retained start: nothing older to find
        for pos, record in self.log.chain(slot.last_pos, slot.count):
            part.positions.append(pos)
            if record.flags & RECALL_MARKER:
                part.markers.append(record)
        part.positions.reverse()
        part.markers.reverse()
        return part

    def next_due_ms(self, horizon_ms: int) -> int | None:
        """The time of the first slot from ``taken_ms`` up to ``horizon_ms`` holding timers, or None."""
        with self._lock:
            t = self.taken_ms
            while t <= horizon_ms:
                if self.wheel.get(t).holds(t):
                    return t
                t += self.precision_ms
            return None

    def mark_fired(self, upto_ms: int) -> None:
        """Every slot before ``upto_ms`` was delivered (written now, made durable at the next sync)."""
        with self._lock:
            if upto_ms > self.fired_ms:
                self.fired_ms = upto_ms
                self._write_checkpoint()

    def adopt_fired(self, upto_ms: int, topic_of: Callable[[TimerRecord], str | None] | None = None) -> bool:
        """A slave copies its master's ``upto_ms`` (docs/timers.md#slaves): forward only, written
        now and made durable at the next sync, as ``mark_fired``. Reading (once promoted) and
        filing new timers start there. With ``topic_of`` (as ``recount``'s) the pending counts
        follow: the timers of the slots passed are no longer counted, as the master's service
        uncounts what it fires or rolls. Returns whether it moved."""
        with self._lock:
            if upto_ms <= self.fired_ms:
                return False
            if topic_of is not None:
                self._uncount_slots(self.fired_ms, upto_ms, topic_of)
            self.fired_ms = upto_ms
            self.taken_ms = max(self.taken_ms, upto_ms)
            self._write_checkpoint()
            return True

    def _uncount_slots(self, begin_ms: int, end_ms: int, topic_of: Callable[[TimerRecord], str | None]) -> None:
        """Take the timers filed in the slots from ``begin_ms`` up to ``end_ms`` out of the pending
        counts: one 24-byte read per slot and a walk of each chain, the master's firing without
        the puts. A span beyond the wheel's (its slots were reused) is counted again instead."""
        begin_ms = self.wheel.round_down(begin_ms)
        if (end_ms - begin_ms) // self.precision_ms >= self.wheel.slot_count:
            self._recount(topic_of, end_ms)
            return
        t = begin_ms
        while t < end_ms:
            slot = self.wheel.get(t)
            if slot.holds(t):
                for pos in self._walk(t, slot).positions:
                    record = self.log.read(pos)
                    if record is None or record.flags & RECALL_MARKER:
                        continue
                    topic = topic_of(record)
                    if topic is not None:
                        # due within the slot: fired; later (a later round, a roll): stored again
                        self.pending.remove(topic, record.deliver_ms,
                                            fired=self.wheel.round_down(record.deliver_ms) <= t)
            t += self.precision_ms

    def checkpoint(self) -> tuple[int, int]:
        """(fired-up-to time, synced TimerLog position), as the checkpoint file holds them."""
        with self._lock:
            return self.fired_ms, self.synced_pos

    def rewind_taken(self) -> None:
        """Read again from ``fired_ms`` (the service lost what it took, e.g. on demotion)."""
        with self._lock:
            self.taken_ms = self.fired_ms
            self._taking = None

    # ------------------------------------------------------------ retention

    def delete_fired(self) -> int:
        """Delete the TimerLog segments whose every record was fired (or rolled), oldest first,
        never the one being written (docs/timers.md#retention). Returns how many."""
        with self._sync_lock, self._lock:
            if self._taking is not None:  # a slot being taken part by part is not fired yet
                done_before = min(self.fired_ms, self._taking.slot_ms)
            else:
                done_before = self.fired_ms
            return len(self.log.delete_done(done_before))

    def oldest_unfired_phys(self) -> int | None:
        """The CommitLog offset of the oldest timer record not yet fired (None: none waits):
        CommitLog retention keeps it and everything after it (docs/timers.md#retention)."""
        with self._lock:
            for pos, record in self.log.records(max(self._unfired_from, self.log.min_position)):
                if record.slot_ms >= self.fired_ms:
                    self._unfired_from = pos
                    return record.phys
            self._unfired_from = self.log.end
            return None

    def unfired_below(self, phys: int) -> int:
        """How many timers not yet fired have their record before CommitLog offset ``phys``
        (lost when the CommitLog was cut there by force)."""
        with self._lock:
            lost = 0
            for _, record in self.log.records(max(self._unfired_from, self.log.min_position)):
                if record.phys >= phys:
                    break
                if record.slot_ms >= self.fired_ms and not record.flags & RECALL_MARKER:
                    lost += 1
            return lost

    # ------------------------------------------------------------ durability

    def sync(self) -> None:
        """Make what was added durable (the flush thread, every ConsumeQueue flush): TimerLog
        first, then the wheel, then the checkpoint naming the log position both cover. The
        fdatasyncs run without the store's lock, so dispatch (on the event loop) never waits for
        the disk: only for copying the changed slots (``MAX_DIRTY_SLOTS`` at most)."""
        with self._sync_lock:
            with self._lock:
                if self.log.end == self.synced_pos and not self.wheel.dirty_count and not self._checkpoint_dirty:
                    return
                log_end = self.log.end
                log_fds = self.log.unsynced_fds()
                changed = self.wheel.changed()  # slots pointing below log_end only
            for fd in log_fds:
                fdatasync(fd)
            with self._lock:
                self.wheel.write(changed)
            self.wheel.fsync()
            with self._lock:
                self.synced_pos = max(self.synced_pos, log_end)
                self._write_checkpoint()
                self._checkpoint_dirty = False  # a change from here on marks it again
            fdatasync(self._checkpoint_fd)

    def _sync(self) -> None:
        """``sync`` all at once under the store's lock (the caller holds it, and ``_sync_lock``
        unless it is dispatch's overflow: see ``add``)."""
        if self.log.end == self.synced_pos and not self.wheel.dirty_count and not self._checkpoint_dirty:
            return
        self.log.sync_all()
        self.wheel.sync()
        self.synced_pos = self.log.end
        self._write_checkpoint()
        fdatasync(self._checkpoint_fd)
        self._checkpoint_dirty = False

    def _write_checkpoint(self) -> None:
        os.pwrite(self._checkpoint_fd, _CHECKPOINT.pack(self.fired_ms, self.synced_pos), 0)
        self._checkpoint_dirty = True

    @property
    def wheel_file_size(self) -> int:
        return self.wheel.slot_count * SLOT_SIZE
