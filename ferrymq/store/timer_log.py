"""The TimerLog (docs/timers.md#timerlog-record-48-bytes-big-endian): fixed-size records of timer
messages, appended in CommitLog order, in segment files read and written with positioned I/O.

Positions are byte offsets into the log as a whole; segment files are named by their first
position (20 digits). Nothing is mapped and nothing per record is kept in memory; per segment,
the latest slot time of its records, so retention can tell when all of them fired.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, Sequence

from ferrymq.store.mapped_file import fdatasync

_BODY = struct.Struct(">qqqqii")  # deliverMs, commitLogOffset, prevPos, slotMs, size, slotSeq
_CRC = struct.Struct(">Ii")  # crc32, flags
_FLAGS = struct.Struct(">i")
RECORD_SIZE = _BODY.size + _CRC.size  # 48
NO_RECORD = -1
READ_RUN = 4096  # records read with one pread when reading many (192 KiB)
RECALL_MARKER = 0x1  # flags: the record is a recall marker (docs/timers.md#recall)


@dataclass(frozen=True, slots=True)
class TimerRecord:
    deliver_ms: int
    phys: int  # CommitLog offset of the timer-topic record
    prev_pos: int  # previous record linked into the same wheel slot, NO_RECORD if none
    slot_ms: int  # the time of the wheel slot this record was linked into
    size: int  # the CommitLog record's size
    slot_seq: int  # records in the slot's chain with this one (1: first of its chain)
    flags: int = 0  # RECALL_MARKER

    def encode(self) -> bytes:
        body = _BODY.pack(self.deliver_ms, self.phys, self.prev_pos, self.slot_ms, self.size, self.slot_seq)
        return body + _CRC.pack(_crc(body, self.flags), self.flags)

    @staticmethod
    def decode(data: bytes) -> "TimerRecord | None":
        """The record in ``data`` (RECORD_SIZE bytes), or None if it is torn or was never written."""
        if len(data) < RECORD_SIZE:
            return None
        body = data[:_BODY.size]
        crc, flags = _CRC.unpack_from(data, _BODY.size)
        if crc != _crc(body, flags):
            return None
        record = TimerRecord(*_BODY.unpack(body), flags)
        return record if record.size > 0 and record.slot_seq > 0 else None


def _crc(body: bytes, flags: int) -> int:
    """CRC32 of the body, and of the flags when there are any (a record without flags checks as
    records did before flags existed)."""
    return zlib.crc32(body + _FLAGS.pack(flags)) if flags else zlib.crc32(body)


class TimerLog:
    """Records at positions [min_position, end). One writer; reads may come from any thread."""

    def __init__(self, directory: str, segment_size: int) -> None:
        if segment_size <= 0 or segment_size % RECORD_SIZE:
            raise ValueError(f"TimerLog segment size {segment_size} is not a positive multiple of {RECORD_SIZE}")
        self.directory = directory
        self.segment_size = segment_size
        self._fds: dict[int, int] = {}  # segment start -> fd
        self._filled: list[int] = []  # segments filled since the last sync (not yet fdatasynced)
        # segment start -> the latest slot time of its records: once the wheel fired past it,
        # every record of the segment is done (docs/timers.md#retention); in memory, rescanned at open
        self._latest_slot: dict[int, int] = {}
        self.end = 0
        self.min_position = 0

    # ------------------------------------------------------------ open / close

    def open(self) -> None:
        """Open the segments found and cut the tail back to the last whole record that checks."""
        os.makedirs(self.directory, exist_ok=True)
        starts = sorted(int(name) for name in os.listdir(self.directory) if name.isdigit())
        for start in starts:
            if start % self.segment_size:
                raise ValueError(f"TimerLog segment {start} is not on a {self.segment_size}-byte boundary")
            self._fds[start] = os.open(self._path(start), os.O_RDWR)
        if not starts:
            return
        self.min_position = starts[0]
        last = starts[-1]
        size = min(os.fstat(self._fds[last]).st_size, self.segment_size)
        end = last + size - size % RECORD_SIZE
        while end > last and self.read(end - RECORD_SIZE) is None:  # torn or never written
            end -= RECORD_SIZE
        self.end = end
        self._cut_file(last, end - last)
        self._scan_latest(starts)

    def _scan_latest(self, starts) -> None:
        """Each segment's latest slot time, from its records (one sequential read per segment)."""
        for start in starts:
            latest = -1
            for _, record in self.records(start, start + self.segment_size):
                latest = max(latest, record.slot_ms)
            self._latest_slot[start] = latest

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._latest_slot = {}

    def sync_all(self) -> None:
        """fdatasync every open segment, not only those ``unsynced_fds`` would name: a full sync
        under the store's lock may run while a sync outside it still holds that list."""
        self._filled = []
        for fd in self._fds.values():
            fdatasync(fd)

    def unsynced_fds(self) -> list[int]:
        """The descriptors a sync must fdatasync now: the segments filled since the last call
        and the one being written. The caller syncs them (possibly without holding the writer
        off) and must keep segments from being closed meanwhile."""
        fds = [self._fds[start] for start in self._filled if start in self._fds]
        self._filled = []
        if self._fds:
            fds.append(self._fds[max(self._fds)])
        return fds

    # ------------------------------------------------------------ writing

    def append(self, records: list[TimerRecord]) -> int:
        """Append ``records``; returns the position of the first. One write per segment touched."""
        first = self.end
        data = b"".join(r.encode() for r in records)
        pos = first
        while data:
            start = pos - pos % self.segment_size
            room = start + self.segment_size - pos
            chunk, data = data[:room], data[room:]
            fd = self._fds.get(start)
            if fd is None:
                if self._fds:  # the segment before is full: the next sync makes it durable
                    self._filled.append(max(self._fds))
                fd = self._fds[start] = os.open(self._path(start), os.O_RDWR | os.O_CREAT, 0o644)
            os.pwrite(fd, chunk, pos - start)
            pos += len(chunk)
        for i, record in enumerate(records):
            start = (first + i * RECORD_SIZE) // self.segment_size * self.segment_size
            if record.slot_ms > self._latest_slot.get(start, -1):
                self._latest_slot[start] = record.slot_ms
        self.end = pos
        return first

    def truncate(self, position: int) -> None:
        """Forget the records at ``position`` and after."""
        position = max(position, self.min_position)
        for start in sorted(self._fds, reverse=True):
            if start >= position and start > self.min_position:
                os.close(self._fds.pop(start))
                os.unlink(self._path(start))
                self._latest_slot.pop(start, None)
        self.end = min(self.end, position)
        if self._fds:
            last = max(self._fds)
            self._cut_file(last, self.end - last)
            self._scan_latest([last])  # what is left of it

    def delete_done(self, done_before_ms: int) -> list[int]:
        """Retention: delete the oldest segments whose every record's slot is before
        ``done_before_ms`` (fired), oldest first, never the one holding the newest record.
        Returns the starts of the segments deleted."""
        deleted = []
        for start in sorted(self._fds)[:-1]:
            if start + self.segment_size > self.end or self._latest_slot.get(start, -1) >= done_before_ms:
                break
            os.close(self._fds.pop(start))
            os.unlink(self._path(start))
            self._latest_slot.pop(start, None)
            deleted.append(start)
        if deleted:
            self.min_position = min(self._fds)
        return deleted

    # ------------------------------------------------------------ reading

    def read(self, position: int) -> TimerRecord | None:
        start = position - position % self.segment_size
        fd = self._fds.get(start)
        if fd is None or position < self.min_position:
            return None
        return TimerRecord.decode(os.pread(fd, RECORD_SIZE, position - start))

    def read_many(self, positions: Sequence[int]) -> list[TimerRecord | None]:
        """``read`` of each position, adjacent positions read together (one pread per run of
        up to ``READ_RUN`` records in a segment): the records of a storm's slot lie side by side."""
        found: list[TimerRecord | None] = []
        i, n = 0, len(positions)
        while i < n:
            pos = positions[i]
            start = pos - pos % self.segment_size
            limit = min(start + self.segment_size, pos + READ_RUN * RECORD_SIZE)
            j = i + 1
            while j < n and positions[j] == positions[j - 1] + RECORD_SIZE and positions[j] < limit:
                j += 1
            fd = self._fds.get(start)
            if fd is None or pos < self.min_position:
                found.extend([None] * (j - i))
            else:
                data = os.pread(fd, (j - i) * RECORD_SIZE, pos - start)
                found.extend(TimerRecord.decode(data[k:k + RECORD_SIZE]) for k in range(0, (j - i) * RECORD_SIZE, RECORD_SIZE))
            i = j
        return found

    def chain(self, last_pos: int, count: int) -> Iterator[tuple[int, TimerRecord]]:
        """(position, record) of a wheel slot's chain from ``last_pos`` back along ``prev_pos``, at
        most ``count``, ending at a record that cannot be read (below the retained start). The
        log is read ``READ_RUN`` records at a time, backwards: a chain mostly runs through
        neighbouring records."""
        block_start, block = 0, b""
        pos = last_pos
        while pos != NO_RECORD and count > 0:
            if not block_start <= pos < block_start + len(block) - RECORD_SIZE + 1:
                start = pos - pos % self.segment_size
                fd = self._fds.get(start)
                if fd is None or pos < self.min_position:
                    return
                block_start = max(start, self.min_position, pos + RECORD_SIZE - READ_RUN * RECORD_SIZE)
                block = os.pread(fd, pos + RECORD_SIZE - block_start, block_start - start)
            off = pos - block_start
            record = TimerRecord.decode(block[off:off + RECORD_SIZE])
            if record is None:
                return
            yield pos, record
            count -= 1
            pos = record.prev_pos

    def records(self, begin: int, end: int | None = None):
        """(position, record) from ``begin`` to ``end`` (default: the log's end), read in chunks."""
        end = self.end if end is None else min(end, self.end)
        pos = max(begin, self.min_position)
        chunk_records = 4096
        while pos < end:
            start = pos - pos % self.segment_size
            n = min(chunk_records * RECORD_SIZE, end - pos, start + self.segment_size - pos)
            data = os.pread(self._fds[start], n, pos - start)
            for off in range(0, len(data) - RECORD_SIZE + 1, RECORD_SIZE):
                record = TimerRecord.decode(data[off:off + RECORD_SIZE])
                if record is not None:
                    yield pos + off, record
            pos += n

    def last(self) -> TimerRecord | None:
        return self.read(self.end - RECORD_SIZE) if self.end > self.min_position else None

    def first_at_or_after_phys(self, phys: int) -> int:
        """Position of the first record whose CommitLog offset is >= ``phys`` (records are in
        CommitLog order), or ``end``."""
        lo, hi = self.min_position // RECORD_SIZE, self.end // RECORD_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            record = self.read(mid * RECORD_SIZE)
            if record is not None and record.phys >= phys:
                hi = mid
            else:
                lo = mid + 1
        return lo * RECORD_SIZE

    # ------------------------------------------------------------ helpers

    def _path(self, start: int) -> str:
        return os.path.join(self.directory, f"{start:020d}")

    def _cut_file(self, start: int, length: int) -> None:
        fd = self._fds.get(start)
        if fd is not None and os.fstat(fd).st_size > length:
            os.ftruncate(fd, length)
