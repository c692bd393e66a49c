"""The CommitLog: every record of every topic, appended in one sequence of segments.

Writers serialise on one lock; inside it a put only rolls the segment if needed, stamps
the offsets and store time into records encoded beforehand, writes them with one
pwrite and indexes them (the ``dispatch`` callback), so the critical section stays short.
Readers take no lock: they only read below ``max_offset``, which moves after the bytes
are in the file.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ferrymq.common.message import BLANK_MAGIC, MESSAGE_MAGIC, MIN_RECORD_SIZE, RECORD_HEADER, check_record, stamp_record
from ferrymq.store.mapped_file import MappedFile, MappedFileQueue

BLANK_RECORD = struct.Struct(">ii")  # [remaining bytes of the segment][BLANK_MAGIC]
BLANK_SIZE = BLANK_RECORD.size  # a record must leave room for this at the segment end

_WALK_CHUNK = 4 * 1024 * 1024  # recovery reads this much per pread
_READ_AHEAD = 4096  # a single-record read guesses the record fits in this
_MAX_RUN_GAP = 16 * 1024  # reading over a gap this small is cheaper than another pread

# dispatch(first queue offset, first physical offset, store timestamp), called under the lock
Dispatch = Callable[[int, int, int], None]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Appended:
    phys_offset: int  # where the first record starts
    queue_offset: int  # first record's queue offset (0 for records that are not dispatched)
    store_timestamp: int


class SegmentWalker:
    """Iterates the records of one segment from a position, validating each.

    Yields (position, size, chunk, position in chunk). When exhausted, ``end`` is where
    valid data stops and ``reached_blank`` tells whether a blank record (a cleanly
    finished segment) stopped it rather than zeros or garbage.
    """

    def __init__(self, seg: MappedFile, start: int = 0, *, check_crc: bool = False) -> None:
        self.seg = seg
        self.end = start
        self.reached_blank = False
        self._check_crc = check_crc

    def __iter__(self) -> Iterator[tuple[int, int, bytes, int]]:
        seg, pos = self.seg, self.end
        chunk, base = b"", pos
        while pos + RECORD_HEADER.size <= seg.size:
            rel = pos - base
            if rel + RECORD_HEADER.size > len(chunk):
                chunk, base, rel = seg.read_raw(pos, _WALK_CHUNK), pos, 0
            total, magic = RECORD_HEADER.unpack_from(chunk, rel)
            if magic == BLANK_MAGIC:
                self.reached_blank = True
                break
            if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE or pos + total > seg.size:
                break
            if rel + total > len(chunk):
                chunk, base, rel = seg.read_raw(pos, max(_WALK_CHUNK, total)), pos, 0
            if check_record(chunk, rel, check_crc=self._check_crc) != total:
                break
            yield pos, total, chunk, rel
            pos += total
            self.end = pos
        self.end = pos


class CommitLog:
    def __init__(self, directory: str, segment_size: int) -> None:
        self.segment_size = segment_size
        self._files = MappedFileQueue(directory, segment_size)
        self.lock = threading.Lock()  # the one write lock of the store
        self.closed = False
        self._flush_lock = threading.Lock()
        self._max_offset = 0
        self._flushed_offset = 0
        # "topic-queueId" -> next queue offset; written only under ``lock``
        self.queue_offsets: dict[str, int] = {}
        self.clock: Callable[[], int] = _wall_clock_ms  # STORETIMESTAMP source; tests pin it

    # ------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        return self._files.min_offset

    @property
    def max_offset(self) -> int:
        """Offset just past the last complete record (what readers may see)."""
        return self._max_offset

    @property
    def segments(self) -> list[MappedFile]:
        return self._files.segments

    def roll_next_file(self, offset: int) -> int:
        return offset + self.segment_size - offset % self.segment_size

    # ------------------------------------------------------------ writing

    def put(
        self, data: bytearray, record_sizes: Sequence[int], queue_key: str, dispatched: bool, dispatch: Dispatch
    ) -> Appended | None:
        """Append one record, or a batch of records back to back, contiguously.

        ``data`` holds records encoded with placeholder offsets; they are stamped here.
        ``dispatched`` is False for prepared/rollback transaction records: queue offset 0,
        no ConsumeQueue entry, the queue's counter does not move.
        On an I/O error nothing stays visible: the write and its index entries are undone.
        Returns None once the log is closed.
        """
        n = len(data)
        if n + BLANK_SIZE > self.segment_size:
            raise ValueError(f"{n} bytes of records cannot fit in a CommitLog segment of {self.segment_size}")
        with self.lock:
            if self.closed:
                return None
            seg = self._files.last()
            if seg is None or seg.remaining < n + BLANK_SIZE:
                seg = self._roll(seg)
            pos = seg.write_position
            phys = seg.start_offset + pos
            queue_offset = self.queue_offsets.get(queue_key, 0) if dispatched else 0
            now = self.clock()
            at = 0
            for i, size in enumerate(record_sizes):
                stamp_record(data, queue_offset + i if dispatched else 0, phys + at, now, at)
                at += size
            try:
                seg.append(data)
                self._max_offset = phys + n  # before dispatch: an indexed record must be readable
                if dispatched:
                    dispatch(queue_offset, phys, now)
            except BaseException:
                self._max_offset = phys
                seg.truncate(pos)
                raise
            if dispatched:
                self.queue_offsets[queue_key] = queue_offset + len(record_sizes)
            return Appended(phys, queue_offset, now)

    def _roll(self, seg: MappedFile | None) -> MappedFile:
        """Close the tail segment with a blank record and start the next one."""
        if seg is not None:
            seg.write_at(seg.write_position, BLANK_RECORD.pack(seg.remaining, BLANK_MAGIC))
            seg.write_position = seg.size
        return self._files.create_next()

    # ------------------------------------------------------------ reading

    def get_data(self, phys_offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``phys_offset`` if all of them are written and within one segment."""
        if phys_offset < self.min_offset or phys_offset + size > self._max_offset or size < 0:
            return None
        seg = self._files.find(phys_offset)
        if seg is None or phys_offset + size > seg.end_offset:
            return None
        data = seg.read(phys_offset - seg.start_offset, size)
        return data if len(data) == size else None

    def read_record(self, phys_offset: int) -> bytes | None:
        """The whole record starting at ``phys_offset``, None unless a message record starts there."""
        seg = self._files.find(phys_offset)
        if seg is None or phys_offset < self.min_offset:
            return None
        head = self.get_data(phys_offset, min(_READ_AHEAD, self._max_offset - phys_offset, seg.end_offset - phys_offset))
        if not head or len(head) < RECORD_HEADER.size:
            return None
        total, magic = RECORD_HEADER.unpack_from(head)
        if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE:
            return None
        return head[:total] if total <= len(head) else self.get_data(phys_offset, total)

    def read_many(self, entries: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Records for ascending (phys offset, size) pairs, reading nearby ones with one pread.

        A queue's records are interleaved with other queues' in the CommitLog, so runs
        are merged across small gaps; None marks a record that is no longer readable.
        """
        out: list[bytes | None] = []
        i, count = 0, len(entries)
        while i < count:
            start, size = entries[i]
            seg_end = self.roll_next_file(start)
            run_end, j = start + size, i + 1
            while j < count:
                phys, next_size = entries[j]
                if phys < run_end or phys - run_end > _MAX_RUN_GAP or phys + next_size > seg_end:
                    break
                run_end, j = phys + next_size, j + 1
            data = self.get_data(start, run_end - start)
            if data is None:  # part of the run is gone: fall back to one read each
                out.extend(self.get_data(p, s) for p, s in entries[i:j])
            else:
                out.extend(data[p - start : p - start + s] for p, s in entries[i:j])
            i = j
        return out

    def iter_records(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """(phys offset, record bytes) of every record in [start, end), hopping over blanks."""
        seg = self._files.find(start)
        while seg is not None and seg.start_offset < end:
            walker = SegmentWalker(seg, max(0, start - seg.start_offset))
            for pos, total, chunk, rel in walker:
                if seg.start_offset + pos >= end:
                    return
                yield seg.start_offset + pos, chunk[rel : rel + total]
            if not walker.reached_blank:
                return
            seg = self._files.find(seg.end_offset)

    # ------------------------------------------------------------ recovery and lifecycle

    def load(self) -> None:
        self._files.load()

    def recover(self, *, segments_to_check: int, check_crc: bool) -> int:
        """Find where valid data ends by walking the last segments record by record, drop
        anything after it, and return that offset. Segments before the walked ones were
        finished with a blank record before their successor existed, so they are whole."""
        segs = self._files.segments
        end = 0
        if segs:
            end = segs[max(0, len(segs) - segments_to_check)].start_offset
            for seg in segs[max(0, len(segs) - segments_to_check) :]:
                walker = SegmentWalker(seg, check_crc=check_crc)
                for _ in walker:
                    pass
                end = seg.start_offset + walker.end
                if not walker.reached_blank:
                    break
                if seg is not segs[-1]:
                    end = seg.end_offset
            self._files.truncate_dirty(end)
        self._max_offset = self._flushed_offset = end
        return end

    def flush(self, until: int | None = None) -> int:
        """fsync what is written; returns the durable offset. With ``until``, callers whose
        data an earlier fsync already covered return at once (group commit)."""
        with self._flush_lock:
            if until is None or self._flushed_offset < until:
                self._flushed_offset = max(self._flushed_offset, self._files.flush())
            return self._flushed_offset

    def close(self) -> None:
        """Flush and close; waits for an in-flight put, later puts get None."""
        with self.lock:
            self.closed = True
            self.flush()
            self._files.close()
