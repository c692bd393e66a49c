"""The CommitLog: every record of every topic, appended in one sequence of segments.

Writers serialise on one lock; inside it a put (or a run of puts written together) only
rolls the segment if needed, stamps the offsets and store time into records encoded
beforehand, writes them with one pwrite and indexes them (the ``dispatch`` callback), so the
critical section stays short.
Readers take no lock: they only read below ``max_offset``, which moves after the bytes
are in the file.

Flushing is separate from writing: ``flush`` fsyncs whatever is written so far, and is
called by the group-commit thread (SYNC_FLUSH) or a timer (ASYNC_FLUSH), never by a put.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ferrymq.common.message import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    RECORD_HEADER,
    check_record,
    record_store_timestamp,
    stamp_records,
)
from ferrymq.store.mapped_file import MappedFile, MappedFileQueue, NotCached, page_cache_holds
from ferrymq.store.results import JoinedRecords

log = logging.getLogger(__name__)

BLANK_RECORD = struct.Struct(">ii")  # [remaining bytes of the segment][BLANK_MAGIC]
BLANK_SIZE = BLANK_RECORD.size  # a record must leave room for this at the segment end

_WALK_CHUNK = 4 * 1024 * 1024  # recovery reads this much per pread
_READ_AHEAD = 4096  # a single-record read guesses the record fits in this
_MAX_RUN_GAP = 16 * 1024  # reading over a gap this small is cheaper than another pread
_STORE_TIMESTAMP_SPAN = 48 + 20 + 8  # bytes of a record that always include STORETIMESTAMP

# dispatch(where each put of a run went, their store timestamp), called under the lock for every
# run of puts (the store decides what goes to ConsumeQueues and the IndexFile)
DispatchRun = Callable[[list["Appended"], int], None]
# roll listener: called under the lock when a new segment starts (the disk guard looks then)
RollListener = Callable[[], None]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Appended:
    phys_offset: int  # where the first record starts
    queue_offset: int  # first record's queue offset (0 for records that are not dispatched)
    store_timestamp: int


@dataclass(slots=True)
class PendingPut:
    """One put's records, encoded with placeholder offsets (stamped when written)."""

    data: bytearray
    record_sizes: Sequence[int]
    queue_key: str  # "topic-queueId"
    dispatched: bool  # False: prepared/rollback transaction records (no queue offset, no entry)


@dataclass(slots=True)
class RecoveryReport:
    """What a recovery walk found: where valid data ends and, if something else than
    clean zeros followed, what and how much was dropped."""

    end: int  # CommitLog offset just past the last valid record
    last_store_timestamp: int  # of that record, 0 if none was walked
    walked_from: int  # offset the validation started at
    records_checked: int = 0
    problem: str | None = None  # why the record at ``end`` was rejected, None for a clean end
    dropped_bytes: int = 0  # non-zero bytes from ``end`` to the last written byte of its segment
    dropped_segments: int = 0  # later segment files deleted with it


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
        # (offset just past the last record, its store timestamp), replaced as one value so
        # a flush can tell which record its fsync covers without taking the write lock.
        self._head = (0, 0)
        self._flushed_offset = 0
        self.on_roll: RollListener | None = None
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
        return self._head[0]

    @property
    def flushed_offset(self) -> int:
        """Everything below this is fsynced."""
        return self._flushed_offset

    @property
    def _max_offset(self) -> int:
        return self._head[0]

    @property
    def segments(self) -> list[MappedFile]:
        return self._files.segments

    def roll_next_file(self, offset: int) -> int:
        return offset + self.segment_size - offset % self.segment_size

    # ------------------------------------------------------------ writing

    def put_run(self, puts: Sequence["PendingPut"], dispatch: DispatchRun) -> list[Appended] | None:
        """Append several puts back to back with one write: as many of ``puts`` as fit in the
        current segment, from the first (rolling to the next segment first if even the first
        does not fit). Returns where each written put went: a prefix of ``puts``; the caller
        puts the rest with another call. ``dispatch(appended, store_timestamp)`` indexes them,
        under the lock. On an I/O error nothing of this call stays visible. None once closed.

        Records come encoded with placeholder offsets; they are stamped here. A put that is not
        ``dispatched`` (prepared/rollback transaction records) gets queue offset 0 and its
        queue's counter does not move. A put that cannot fit even in an empty segment raises ValueError."""
        with self.lock:
            if self.closed:
                return None
            seg = self._files.last()
            room = seg.remaining - BLANK_SIZE if seg is not None else -1
            if room < len(puts[0].data):
                seg = self._roll(seg)
                room = seg.remaining - BLANK_SIZE
            pos = seg.write_position
            phys = seg.start_offset + pos
            now = self.clock()
            next_offsets: dict[str, int] = {}  # queues this run moves (the table moves once written)
            placed: list[Appended] = []
            at = 0
            for put in puts:
                n = len(put.data)
                if at + n > room:
                    break
                key = put.queue_key
                queue_offset = 0
                if put.dispatched:
                    queue_offset = next_offsets.get(key)
                    if queue_offset is None:
                        queue_offset = self.queue_offsets.get(key, 0)
                    next_offsets[key] = queue_offset + len(put.record_sizes)
                stamp_records(put.data, put.record_sizes, queue_offset if put.dispatched else -1, phys + at, now)
                placed.append(Appended(phys + at, queue_offset, now))
                at += n
            if not placed:
                raise ValueError(f"{len(puts[0].data)} bytes of records cannot fit in a CommitLog segment of {self.segment_size}")
            data = puts[0].data if len(placed) == 1 else bytearray().join(p.data for p in puts[:len(placed)])
            head = self._head
            try:
                seg.append(data)
                self._head = (phys + at, now)  # before dispatch: an indexed record must be readable
                dispatch(placed, now)
            except BaseException:
                self._head = head
                try:
                    seg.truncate(pos)  # zeros again: nothing half-written stays for recovery to find
                except OSError:
                    seg.write_position = pos  # at least the next record overwrites it
                raise
            self.queue_offsets.update(next_offsets)
            return placed

    def append_copy(self, offset: int, data: bytes | memoryview, store_timestamp: int,
                    dispatch: Callable[[], None]) -> None:
        """Replication (a slave): write bytes copied from a master's CommitLog (whole records,
        or a segment's whole blank tail; never across a segment end) at ``offset``, which must
        be where this log ends (an empty log starts a segment there). ``dispatch`` then indexes
        the records, under the lock as a put does; on an error nothing stays visible."""
        with self.lock:
            if self.closed:
                raise ValueError("the CommitLog is closed")
            seg, head = self._files.last(), self._head
            if seg is not None and offset != head[0]:
                raise ValueError(f"replicated data for offset {offset}, but this CommitLog ends at {head[0]}")
            if seg is None and offset % self.segment_size:
                raise ValueError(f"replication must start a CommitLog file, got offset {offset} (is "
                                 f"mappedFileSizeCommitLog {self.segment_size} the master's?)")
            if seg is None or offset >= seg.end_offset:
                seg = self._files.create_next(offset)
                if self.on_roll is not None:
                    self.on_roll()
            pos = offset - seg.start_offset
            if pos + len(data) > seg.size:
                raise ValueError(f"{len(data)} replicated bytes at offset {offset} cross the end of a CommitLog file "
                                 f"of {self.segment_size} bytes (is mappedFileSizeCommitLog the master's?)")
            try:
                seg.write_at(pos, data)
                seg.write_position = pos + len(data)
                self._head = (offset + len(data), store_timestamp or head[1])
                dispatch()
            except BaseException:
                self._head = head
                try:
                    seg.truncate(pos)
                except OSError:
                    seg.write_position = pos
                raise

    def _roll(self, seg: MappedFile | None) -> MappedFile:
        """Close the tail segment with a blank record and start the next one.

        Each step can fail (disk full); the state only moves once both files are right, so
        the next put simply tries again."""
        if seg is not None and seg.write_position < seg.size:
            seg.write_at(seg.write_position, BLANK_RECORD.pack(seg.remaining, BLANK_MAGIC))
        nxt = self._files.create_next()
        if seg is not None:
            seg.write_position = seg.size
        if self.on_roll is not None:
            self.on_roll()
        return nxt

    # ------------------------------------------------------------ reading

    def get_data(self, phys_offset: int, size: int, *, nowait: bool = False) -> bytes | None:
        """``size`` bytes at ``phys_offset`` if all of them are written and within one segment.
        ``nowait``: only from the page cache (else NotCached)."""
        if phys_offset < self.min_offset or phys_offset + size > self._max_offset or size < 0:
            return None
        seg = self._files.find(phys_offset)
        if seg is None or phys_offset + size > seg.end_offset:
            return None
        data = seg.read(phys_offset - seg.start_offset, size, nowait=nowait)
        return data if len(data) == size else None

    def store_timestamp(self, phys_offset: int) -> int:
        """STORETIMESTAMP of the record at ``phys_offset``; -1 if none can be read there."""
        head = self.get_data(phys_offset, _STORE_TIMESTAMP_SPAN)
        return record_store_timestamp(head) if head and len(head) >= _STORE_TIMESTAMP_SPAN else -1

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

    def read_many(self, entries: Sequence[tuple[int, int]], *, nowait: bool = False) -> list[bytes | None]:
        """Records for ascending (phys offset, size) pairs, reading nearby ones with one pread.

        A queue's records are interleaved with other queues' in the CommitLog, so runs
        are merged across small gaps; None marks a record that is no longer readable.
        ``nowait``: only from the page cache (else NotCached).
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
            data = self.get_data(start, run_end - start, nowait=nowait)
            if data is None:  # part of the run is gone: fall back to one read each
                out.extend(self.get_data(p, s, nowait=nowait) for p, s in entries[i:j])
            else:
                out.extend(data[p - start : p - start + s] for p, s in entries[i:j])
            i = j
        return out

    def read_joined(self, entries: Sequence[tuple[int, int]], *, nowait: bool = False) -> JoinedRecords | None:
        """The records at ascending (phys offset, size) pairs copied back to back into one
        buffer out of their segment's mapping: only their own bytes, where ``read_many``'s pread
        of a span copies the other queues' records between them too. For records in the page
        cache (a copy out of a mapping holds the GIL, and a page not in memory would hold it
        for a disk read). None unless all of them are written and in one segment. ``nowait``:
        NotCached unless the page cache holds every page from the first record to the end of the
        last (one cachestat call; a page evicted between it and the copy is one disk read where
        the caller wanted none, not an error)."""
        start, (last, last_size) = entries[0][0], entries[-1]
        if start < self.min_offset or last + last_size > self._max_offset:
            return None
        seg = self._files.find(start)
        if seg is None or last + last_size > seg.end_offset:
            return None
        try:
            if nowait and not page_cache_holds(seg.fd, start - seg.start_offset, last + last_size - start):
                raise NotCached
            view = seg.view()
        except ValueError:  # closed: deleted by retention meanwhile
            return None
        base = seg.start_offset
        data = b"".join([view[p - base : p - base + s] for p, s in entries])
        return JoinedRecords(data, [s for _, s in entries])

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

    def has_record(self, phys_offset: int, size: int) -> bool:
        """Whether a well-formed record of ``size`` bytes is on disk at ``phys_offset`` (recovery)."""
        seg = self._files.find(phys_offset)
        if seg is None or size <= 0:
            return False
        return check_record(seg.read_raw(phys_offset - seg.start_offset, size)) == size

    def first_store_timestamp(self, seg: MappedFile) -> int:
        """Store time of the segment's first record; 0 if it does not start with one."""
        head = seg.read_raw(0, 128)
        if len(head) < 64 or RECORD_HEADER.unpack_from(head)[1] != MESSAGE_MAGIC:
            return 0
        return record_store_timestamp(head)

    def recover(self, *, start_index: int, check_crc: bool, start_at: int | None = None,
                on_record: Callable[[int, bytes, int, int], None] | None = None) -> RecoveryReport:
        """Find where valid data ends by walking segments from ``start_index`` record by
        record (magic code, length, field layout and, with ``check_crc``, the body CRC),
        drop everything after it, and report what was found. ``on_record(offset, chunk,
        position in chunk, size)`` sees each valid record as the walk passes it.

        Segments before ``start_index`` are trusted: each was finished with a blank record
        before its successor existed, and the checkpoint says they are on disk."""
        segs = self._files.segments
        if not segs:
            self._head = (0, 0)
            self._flushed_offset = 0
            return RecoveryReport(0, 0, 0)
        start_index = min(max(0, start_index), len(segs) - 1)
        first = segs[start_index]
        # ``start_at``: a known record boundary inside the first segment walked (a clean restart
        # starts at the end of the last ConsumeQueue entry instead of re-reading the whole file).
        start_pos = start_at - first.start_offset if start_at is not None and first.start_offset <= start_at < first.end_offset else 0
        report = RecoveryReport(first.start_offset + start_pos, 0, first.start_offset + start_pos)
        for i in range(start_index, len(segs)):
            seg = segs[i]
            walker = SegmentWalker(seg, start_pos if i == start_index else 0, check_crc=check_crc)
            for pos, total, chunk, rel in walker:
                report.records_checked += 1
                report.last_store_timestamp = record_store_timestamp(chunk, rel)
                if on_record is not None:
                    on_record(seg.start_offset + pos, chunk, rel, total)
            report.end = seg.start_offset + walker.end
            if not walker.reached_blank:
                report.problem = self._diagnose(seg, walker.end)
                report.dropped_bytes = _nonzero_extent(seg, walker.end)
                report.dropped_segments = len(segs) - 1 - i
                break
            if i < len(segs) - 1:
                report.end = seg.end_offset  # a blank record: the next record starts in the next file
        if report.problem is not None or report.dropped_bytes or report.dropped_segments:
            report.problem = report.problem or "zeros where a record should start, data after them"
            log.warning(
                "CommitLog recovery: invalid data at offset %d (%s); truncating the CommitLog at %d, "
                "dropping %d bytes of that file%s",
                report.end, report.problem, report.end, report.dropped_bytes,
                f" and {report.dropped_segments} later file(s)" if report.dropped_segments else "",
            )
        self._files.truncate_dirty(report.end)
        self._head = (report.end, report.last_store_timestamp)
        self._flushed_offset = report.end
        return report

    def truncate(self, offset: int) -> RecoveryReport:
        """Drop every record at and after ``offset`` (a record boundary) and fsync what is
        left of its file; the head becomes the end of the last record before it (found by
        walking that file as recovery does). For a broker rejoining its group as a slave."""
        with self.lock:
            if self.closed:
                raise ValueError("the CommitLog is closed")
            if offset >= self._head[0]:
                return RecoveryReport(self._head[0], self._head[1], self._head[0])
            offset = max(offset, self.min_offset)
            self._files.truncate_dirty(offset)
            segs = self._files.segments
            holder = self._files.find(max(offset - 1, self.min_offset))
            start_index = segs.index(holder) if holder in segs else max(0, len(segs) - 1)
            report = self.recover(start_index=start_index, check_crc=False)
            for seg in segs[start_index:]:
                seg.flushed_position = 0
                seg.flush()
            return report

    def sync_from(self, offset: int) -> None:
        """fsync every segment from the one holding ``offset``: after a process crash the data
        recovery accepted may still sit dirty in the page cache, and the checkpoint is about
        to call it flushed."""
        for seg in self._files.segments:
            if seg.end_offset > offset:
                seg.flushed_position = 0
                seg.flush()

    @staticmethod
    def _diagnose(seg: MappedFile, pos: int) -> str | None:
        """Why no valid record starts at ``pos``; None when it is the clean end of the data."""
        head = seg.read_raw(pos, RECORD_HEADER.size)
        if len(head) < RECORD_HEADER.size:
            return None if not head.strip(b"\0") else "a record header cut by the end of the file"
        total, magic = RECORD_HEADER.unpack(head)
        if total == 0 and magic == 0:
            return None
        if magic != MESSAGE_MAGIC:
            return f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
        if total < MIN_RECORD_SIZE or pos + total > seg.size:
            return f"bad total size {total}"
        record = seg.read_raw(pos, total)
        if check_record(record, check_crc=False) == total:
            return "body CRC mismatch"
        if not record[total // 2 :].strip(b"\0"):
            return f"incomplete record ({total} bytes announced, the rest never written)"
        return "record fields do not add up to its total size"

    def flush(self, least_pages: int = 0) -> tuple[int, int] | None:
        """fsync what is written, if at least ``least_pages`` pages are dirty (0: always).
        Returns (durable offset, store time of the last record it covers), None if skipped."""
        with self._flush_lock:
            head = self._head  # everything up to here is written; the fsync below covers it
            if least_pages > 0 and self._files.dirty_pages() < least_pages:
                return None
            if head[0] > self._flushed_offset:
                self._files.flush()
                self._flushed_offset = head[0]
            return self._flushed_offset, head[1]

    def delete_expired(self, expired_ms: int, now_ms: int, *, at_once: bool, max_files: int = 10,
                       keep_from: int | None = None) -> int:
        """Retention: delete old segments (never the one being written, nor one holding
        ``keep_from`` or anything after it). Returns how many."""
        return len(self._files.delete_expired_by_time(expired_ms, now_ms, at_once=at_once, max_files=max_files,
                                                      keep_from=keep_from))

    def close(self) -> None:
        """Flush and close; waits for an in-flight put, later puts get None."""
        with self.lock:
            self.closed = True
            self.flush()
            self._files.close()


def _nonzero_extent(seg: MappedFile, pos: int) -> int:
    """Bytes from ``pos`` to the last non-zero byte of the segment (0 if only zeros follow).

    Segments are sparse: SEEK_DATA / SEEK_HOLE skip the never-written (and truncated) parts,
    so the usual case, a clean end followed by a hole, costs a couple of system calls."""
    fd, size, last, at = seg.fd, seg.size, 0, pos
    while at < size:
        try:
            data_at = os.lseek(fd, at, os.SEEK_DATA)
            hole_at = min(os.lseek(fd, data_at, os.SEEK_HOLE), size)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after ``at``
                break
            data_at, hole_at = at, size  # no sparse-file support here: read it all
        if data_at >= size:
            break
        while data_at < hole_at:
            chunk = os.pread(fd, min(_WALK_CHUNK, hole_at - data_at), data_at)
            if not chunk:
                break
            stripped = len(chunk.rstrip(b"\0"))
            if stripped:
                last = data_at + stripped
            data_at += len(chunk)
        at = hole_at
    return max(0, last - pos)
