"""One topic/queue's index into the CommitLog (docs/wire-format.md#consumequeue-entry).

Entry n (the queue's logical offset n) is the 20 bytes at byte n*20 of the queue's
segments: ``commitLogOffset i64 | size i32 | tagsCode i64``. Entries are appended in
CommitLog order, so commitLogOffset grows with n; recovery relies on that to binary
search instead of walking millions of entries.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from ferrymq.store.mapped_file import MappedFile, MappedFileQueue

CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_SIZE = CQ_ENTRY.size  # 20
_EMPTY_ENTRY = bytes(CQ_ENTRY_SIZE)


class ConsumeQueueGapError(ValueError):
    """An entry would leave a hole in a queue: its earlier entries are missing."""


def _first_true(lo: int, hi: int, pred) -> int:
    """Smallest i in [lo, hi) with pred(i) true, else hi; pred must be monotone (False..True)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class ConsumeQueue:
    """Logical offsets [min_offset, max_offset) of one queue. One writer (the store's put
    lock), any number of readers."""

    def __init__(self, root_dir: str, topic: str, queue_id: int, segment_size: int) -> None:
        if segment_size % CQ_ENTRY_SIZE:
            raise ValueError(f"ConsumeQueue segment size {segment_size} is not a multiple of {CQ_ENTRY_SIZE}")
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_segment = segment_size // CQ_ENTRY_SIZE
        self._files = MappedFileQueue(os.path.join(root_dir, topic, str(queue_id)), segment_size)
        self._min_offset = 0
        self.max_phys_end = 0  # CommitLog offset just past the last indexed record

    # ------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        return self._min_offset

    @property
    def max_offset(self) -> int:
        """Next logical offset to be written (= entry count when nothing was deleted)."""
        last = self._files.last()
        if last is None:
            return self._min_offset
        return (last.start_offset + last.write_position) // CQ_ENTRY_SIZE

    def roll_next_file(self, offset: int) -> int:
        """First logical offset of the segment after the one holding ``offset``."""
        return offset + self.entries_per_segment - offset % self.entries_per_segment

    # ------------------------------------------------------------ reading

    def read_entries(self, offset: int, max_entries: int, *, nowait: bool = False) -> bytes | None:
        """Raw entries from ``offset``, at most ``max_entries``, never crossing into the next
        segment (as Java's getIndexBuffer). None when no segment holds ``offset``. ``nowait``:
        only from the page cache (else NotCached)."""
        pos = offset * CQ_ENTRY_SIZE
        seg = self._files.find(pos)
        if seg is None:
            return None
        return seg.read(pos - seg.start_offset, max_entries * CQ_ENTRY_SIZE, nowait=nowait)

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """(commitLogOffset, size, tagsCode) of one entry, None if not written."""
        if not self._min_offset <= offset < self.max_offset:
            return None
        data = self.read_entries(offset, 1)
        return CQ_ENTRY.unpack(data) if data and len(data) == CQ_ENTRY_SIZE else None

    # ------------------------------------------------------------ writing

    def search_offset(self, timestamp: int, cl_min: int, store_time_of: Callable[[int], int]) -> int:
        """The offset whose record was stored at ``timestamp``, else the nearer of the two
        neighbours (the earlier on a tie), clamped to [min, max]. Binary search; entries below
        ``cl_min`` point at deleted records; ``store_time_of(phys)`` is -1 when unreadable."""
        lo, hi = self.min_offset, self.max_offset - 1
        left = right = -1
        left_time = right_time = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            entry = self.entry(mid)
            if entry is None:
                break
            if entry[0] < cl_min:  # record already deleted: search later entries
                lo, left = mid + 1, mid
                continue
            store_time = store_time_of(entry[0])
            if store_time < 0:
                break
            if store_time == timestamp:
                return mid
            if store_time > timestamp:
                hi, right, right_time = mid - 1, mid, store_time
            else:
                lo, left, left_time = mid + 1, mid, store_time
        if left_time == -1:
            found = right if right >= 0 else left
        elif right_time == -1:
            found = left
        else:
            found = right if abs(timestamp - left_time) > abs(timestamp - right_time) else left
        return min(max(found, self.min_offset), self.max_offset)

    def append(self, queue_offset: int, entries: bytes, phys_end: int) -> None:
        """Write packed entries starting at logical ``queue_offset``. Caller holds the put lock.

        An offset below max_offset is already indexed (a replay after a crash) and skipped,
        as Java does. The first entry of an empty queue may start anywhere (its earlier
        records are gone); a hole in the middle is a bug upstream.
        """
        expected = self.max_offset
        if queue_offset < expected:
            skip = min(len(entries), (expected - queue_offset) * CQ_ENTRY_SIZE)
            entries, queue_offset = entries[skip:], expected
            if not entries:
                return
        if queue_offset > expected:
            if self._files.last() is not None:
                raise ConsumeQueueGapError(f"{self.topic}-{self.queue_id}: entry for offset {queue_offset}, expected {expected}")
            self._start_at(queue_offset)
        view = memoryview(entries)
        try:
            while view:  # a batch's entries may continue in the next segment
                seg = self._files.last()
                room = seg.remaining if seg is not None else 0
                if room == 0:
                    seg = self._files.create_next()
                    room = seg.remaining
                chunk = view[:room]
                seg.append(chunk)
                view = view[len(chunk) :]
        except BaseException:
            self._files.truncate_dirty(queue_offset * CQ_ENTRY_SIZE)  # all or nothing
            raise
        self.max_phys_end = phys_end

    def truncate_to(self, queue_offset: int) -> None:
        """Forget entries from ``queue_offset`` on (undoing a put whose index write failed)."""
        if queue_offset < self.max_offset:
            self._files.truncate_dirty(queue_offset * CQ_ENTRY_SIZE)
            self._refresh_phys_end()

    def _start_at(self, queue_offset: int) -> None:
        seg = self._files.create_next(queue_offset * CQ_ENTRY_SIZE)
        seg.write_position = queue_offset * CQ_ENTRY_SIZE - seg.start_offset  # zeros before: never read
        self._min_offset = queue_offset

    # ------------------------------------------------------------ recovery

    def load(self) -> None:
        """Open the segments and find the written range.

        Entries are written contiguously, so within a segment the non-zero entries form one
        run; binary searches find its ends with a few 20-byte reads instead of a full walk.
        """
        self._files.load()
        segs = self._files.segments
        if not segs:
            return
        first, last = segs[0], segs[-1]
        per_seg = self.entries_per_segment
        lead = _first_true(0, per_seg, lambda i: _written(first, i))
        if lead == per_seg:
            lead = 0  # nothing written in it at all: not a lead-in of zeros
        self._min_offset = first.start_offset // CQ_ENTRY_SIZE + lead
        lo = lead if first is last else 0
        end = _first_true(lo, per_seg, lambda i: not _written(last, i))
        while end > lo and not _valid(last, end - 1):
            end -= 1  # a torn last entry
        self._files.truncate_dirty(last.start_offset + end * CQ_ENTRY_SIZE)
        self._refresh_phys_end()

    def truncate_beyond(self, phys_end: int) -> None:
        """Drop entries whose record does not end within the CommitLog's [.., phys_end)."""

        def beyond(n: int) -> bool:
            e = self.entry(n)
            return e is None or e[0] + e[1] > phys_end

        hi = self.max_offset
        cut = _first_true(self._min_offset, hi, beyond)
        if cut < hi:
            self._files.truncate_dirty(cut * CQ_ENTRY_SIZE)
            self._refresh_phys_end()

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Skip leading entries whose records the CommitLog no longer has."""

        def present(n: int) -> bool:
            e = self.entry(n)
            return e is not None and e[0] >= commit_log_min

        self._min_offset = _first_true(self._min_offset, self.max_offset, present)

    def _refresh_phys_end(self) -> None:
        last = self.entry(self.max_offset - 1)
        self.max_phys_end = last[0] + last[1] if last else 0

    # ------------------------------------------------------------ lifecycle

    def flush(self, least_pages: int = 0) -> bool:
        """fsync if at least ``least_pages`` 4 KiB pages are dirty (0: whatever is dirty)."""
        if least_pages > 0 and self._files.dirty_pages() < least_pages:
            return False
        self._files.flush()
        return True

    def delete_expired(self, commit_log_min: int) -> int:
        """Retention: delete leading files whose every record is gone from the CommitLog,
        then move the min offset to the first entry still readable. Returns files deleted."""

        def expired(seg: MappedFile) -> bool:
            last = seg.read_raw(seg.size - CQ_ENTRY_SIZE, CQ_ENTRY_SIZE)
            return len(last) == CQ_ENTRY_SIZE and CQ_ENTRY.unpack(last)[0] < commit_log_min

        deleted = self._files.delete_leading(expired)
        first = self._files.first()
        if first is not None:
            self._min_offset = max(self._min_offset, first.start_offset // CQ_ENTRY_SIZE)
        self.correct_min_offset(commit_log_min)
        return len(deleted)

    def close(self) -> None:
        self._files.close()


def _written(seg: MappedFile, index: int) -> bool:
    return seg.read_raw(index * CQ_ENTRY_SIZE, CQ_ENTRY_SIZE) != _EMPTY_ENTRY


def _valid(seg: MappedFile, index: int) -> bool:
    data = seg.read_raw(index * CQ_ENTRY_SIZE, CQ_ENTRY_SIZE)
    if len(data) != CQ_ENTRY_SIZE:
        return False
    phys, size, _ = CQ_ENTRY.unpack(data)
    return phys >= 0 and size > 0
