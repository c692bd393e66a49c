"""One IndexFile (docs/wire-format.md#indexfile): a hash table on disk from ``topic#key`` to CommitLog offsets.

Layout, big-endian, exactly RocketMQ's:

    header (40 B)   beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 |
                    endPhyOffset i64 | hashSlotCount i32 | indexCount i32 (starts at 1)
    slots           hashSlotNum x i32: number of the newest entry for that hash, 0 = none
    entries         indexNum x 20 B: keyHash i32 | phyOffset i64 | timeDiff i32 (s since
                    beginTimestamp) | prevIndex i32 (older entry of the same slot, 0 = end)

Entries are appended in CommitLog order and never rewritten, so a slot's chain runs from
newest to oldest. The file is created sparse at full size and written with pwrite.

Write order, so that readers (no lock) and a crash at any point stay safe: the entry,
then the slot, then the in-memory count (a reader seeing the slot before the count accepts
a slot equal to indexCount, as RocketMQ's does: that entry is complete). The header is written when the store's
ConsumeQueue timer runs (every second; with an fsync on its thorough flushes, which the
checkpoint's index time follows), not per put. A crash can therefore leave entries past the
on-disk indexCount whose slots already point at them; ``recover_tail`` unlinks them again
(each entry remembers the slot value it replaced), and recovery indexes those records
again from the CommitLog.

The writer keeps the slots of the file it writes in memory (4 bytes a slot: 20 MB for the
default 5,000,000), so indexing reads nothing. It writes a record's entries with one pwrite
and its slots through a shared mapping of the header and slot table (stores to the page
cache, no system call: the index was ~4 pwrites a message, a sixth of a batch send's CPU).
That region is allocated on disk first (fallocate), so a store through the mapping can never
meet a full disk (SIGBUS); where it cannot be allocated the slots are written with pwrite.
Readers pread through the same page cache, so they see the mapping's stores.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import sys
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.common import speedups
from ferrymq.common.java_hash import java_string_hash
from ferrymq.store.mapped_file import AheadAllocator, fdatasync

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 20
_SLOT = struct.Struct(">i")
_INT_MAX = 2**31 - 1
_EMPTY_ENTRY = bytes(INDEX_ENTRY_SIZE)
_native = speedups.load("ferrymq.common._message_codec")


def index_key_hash(key: str) -> int:
    """Java's ``Math.abs(key.hashCode())``, with Integer.MIN_VALUE (whose abs overflows) as 0."""
    h = abs(java_string_hash(key))
    return 0 if h > _INT_MAX else h


def py_index_entries(postings: list[tuple[str, int]], slots: array, slot_num: int, first: int, begin_ts: int,
                     store_timestamp: int) -> tuple[bytes, list[tuple[int, int]], int]:
    """The entries of ``postings`` (key, CommitLog offset), numbered from ``first``, each
    linked into ``slots`` (the file's slot table, updated in place). Returns the packed
    entries, (slot, the value it had before) per entry, in order, and how many slots were
    empty before. The compiled twin is ferrymq/common/_message_codec.c's ``index_entries``."""
    linked: list[tuple[int, int]] = []
    entries = bytearray()
    new_slots = 0
    n = first
    try:
        for key, phy_offset in postings:
            key_hash = index_key_hash(key)
            slot = key_hash % slot_num
            slot_value = slots[slot]
            if slot_value <= 0 or slot_value > n:  # (a key of this record may have linked it already)
                slot_value = 0
                new_slots += 1
            # As RocketMQ: the seconds since the file's begin time, which the first entry resets.
            time_diff = 0 if begin_ts <= 0 else min(max((store_timestamp - begin_ts) // 1000, 0), _INT_MAX)
            if n <= 1:
                begin_ts = store_timestamp
            entries += INDEX_ENTRY.pack(key_hash, phy_offset, time_diff, slot_value)
            linked.append((slot, slots[slot]))
            slots[slot] = n
            n += 1
    except BaseException:  # (a value out of range) the table is as it was
        for slot, previous in reversed(linked):
            slots[slot] = previous
        raise
    return bytes(entries), linked, new_slots


def py_link_slots(slot_map: mmap.mmap | bytearray, base: int, linked: list[tuple[int, int]], first: int) -> None:
    """Point each slot of ``linked`` (``index_entries``' (slot, previous) pairs) at its entry,
    numbered from ``first``, in a mapped slot table starting at ``base`` (big-endian, as the file).
    The compiled twin is ferrymq/common/_message_codec.c's ``link_slots``."""
    for number, (slot, _) in enumerate(linked, first):
        _SLOT.pack_into(slot_map, base + slot * 4, number)


if _native is not None:
    _native_index_entries = _native.index_entries
    _native_link_slots = _native.link_slots

    def link_slots(slot_map: mmap.mmap | bytearray, base: int, linked: list[tuple[int, int]], first: int) -> None:
        if _native_link_slots(slot_map, base, linked, first) is NotImplemented:  # (Python raises what it must)
            py_link_slots(slot_map, base, linked, first)

    def index_entries(postings: list[tuple[str, int]], slots: array, slot_num: int, first: int, begin_ts: int,
                      store_timestamp: int) -> tuple[bytes, list[tuple[int, int]], int]:
        got = _native_index_entries(postings, slots, slot_num, first, begin_ts, store_timestamp)
        if got is NotImplemented:  # an unusual shape: Python decides (and raises, if it must)
            return py_index_entries(postings, slots, slot_num, first, begin_ts, store_timestamp)
        return got
else:
    index_entries, link_slots = py_index_entries, py_link_slots


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * 4 + index_num * INDEX_ENTRY_SIZE


@dataclass
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def pack(self) -> bytes:
        return INDEX_HEADER.pack(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                                 self.end_phy_offset, self.hash_slot_count, self.index_count)


class IndexFile:
    def __init__(self, path: str, hash_slot_num: int, index_num: int, *, create: bool = False,
                 end_phy_offset: int = 0, end_timestamp: int = 0) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.size = index_file_size(hash_slot_num, index_num)
        self.header = IndexHeader()
        self.dirty = False
        # Guards the in-memory header between the writer (under the store's put lock) and a flush.
        self._lock = threading.Lock()
        self._slots: array | None = None  # the writer's copy of the slot table, loaded on first put
        # The writer's mapping of header + slot table; None until the first write, False where the
        # region cannot be allocated (then slots are written with pwrite).
        self._slot_map: mmap.mmap | bool | None = None
        self._allocator = AheadAllocator(self.size, ahead=1 << 20)  # for the entries, appended in order
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, self.size)
                # As RocketMQ: a new file continues where the previous one ended.
                self.header.begin_phy_offset = self.header.end_phy_offset = max(0, end_phy_offset)
                self.header.begin_timestamp = self.header.end_timestamp = max(0, end_timestamp)
                os.pwrite(fd, self.header.pack(), 0)
                self._slots = array("i", [0]) * hash_slot_num  # a new file's slots are all empty: no read
            except BaseException:
                os.close(fd)
                os.unlink(path)
                raise
        else:
            actual = os.path.getsize(path)
            if actual != self.size:
                raise ValueError(f"index file {path} is {actual} bytes, expected {self.size} "
                                 "(were maxHashSlotNum / maxIndexNum changed?)")
            fd = os.open(path, os.O_RDWR)
            data = os.pread(fd, INDEX_HEADER_SIZE, 0)
            self.header = IndexHeader(*INDEX_HEADER.unpack(data))
            if self.header.index_count <= 0:
                self.header.index_count = 1
        self._fd = fd

    # ------------------------------------------------------------ geometry

    def _slot_pos(self, key_hash: int) -> int:
        return INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * 4

    def _entry_pos(self, n: int) -> int:
        return INDEX_HEADER_SIZE + self.hash_slot_num * 4 + n * INDEX_ENTRY_SIZE

    @property
    def is_write_full(self) -> bool:
        return self.header.index_count >= self.index_num

    @property
    def entry_count(self) -> int:
        return self.header.index_count - 1

    def _read_slot(self, key_hash: int) -> int:
        return _SLOT.unpack(os.pread(self._fd, 4, self._slot_pos(key_hash)))[0]

    def read_entry(self, n: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of entry ``n``."""
        return INDEX_ENTRY.unpack(os.pread(self._fd, INDEX_ENTRY_SIZE, self._entry_pos(n)))

    # ------------------------------------------------------------ writing (under the store's put lock)

    def prepare_for_writing(self) -> None:
        """Load the slot table and map it now (20 MB for the default size), not in the first put
        that needs it: puts run on the broker's event loop, loading does not."""
        self._slot_table()
        self._slot_writer()

    def _slot_writer(self) -> mmap.mmap | None:
        """The mapping slots are stored through; None where the region could not be allocated."""
        if self._slot_map is None:
            end = INDEX_HEADER_SIZE + self.hash_slot_num * 4
            try:
                os.posix_fallocate(self._fd, 0, end)  # blocks for every slot: no store can fault
                self._slot_map = mmap.mmap(self._fd, end)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise  # the disk is full: this put is refused, a later one tries again
                self._slot_map = False  # no fallocate or mmap here: pwrite each slot
        return self._slot_map or None

    def _slot_table(self) -> array:
        if self._slots is None:
            data = os.pread(self._fd, self.hash_slot_num * 4, INDEX_HEADER_SIZE)
            slots = array("i", data)
            if sys.byteorder == "little":
                slots.byteswap()  # the file is big-endian
            self._slots = slots
        return self._slots

    def put(self, postings: list[tuple[str, int]], store_timestamp: int) -> int:
        """Index records stored together: each (key, CommitLog offset) in order. Returns how
        many fit (the rest go to the next file).

        The entries go out in one pwrite, then the slots, then the counts. All or nothing on
        an I/O error: slots already linked are unlinked again before the error propagates,
        so a refused put leaves no trace here."""
        header = self.header
        slots = self._slot_table()
        slot_map = self._slot_writer()
        first = header.index_count
        room = self.index_num - first
        if room <= 0 or not postings:
            return 0
        if len(postings) > room:
            postings = postings[:room]
        entries, linked, new_slots = index_entries(postings, slots, self.hash_slot_num, first,
                                                   header.begin_timestamp, store_timestamp)
        n = first + len(postings)
        try:
            pos = self._entry_pos(first)
            self._allocator.before_write(self._fd, pos, pos + len(entries))
            _pwrite(self._fd, entries, pos)
            if slot_map is not None:
                link_slots(slot_map, INDEX_HEADER_SIZE, linked, first)
            else:
                for (slot, _), number in zip(linked, range(first, n)):
                    _pwrite(self._fd, _SLOT.pack(number), INDEX_HEADER_SIZE + slot * 4)
        except BaseException:
            for slot, previous in reversed(linked):
                slots[slot] = previous
                os.pwrite(self._fd, _SLOT.pack(previous), INDEX_HEADER_SIZE + slot * 4)
            raise
        with self._lock:
            if first <= 1:
                header.begin_phy_offset, header.begin_timestamp = postings[0][1], store_timestamp
            header.hash_slot_count += new_slots
            header.index_count = n
            header.end_phy_offset, header.end_timestamp = postings[-1][1], store_timestamp
        self.dirty = True
        return len(postings)

    def truncate_entries(self, keep: int, store_time_of: Callable[[int], int]) -> None:
        """Remove entries numbered ``keep`` and above, newest first, restoring the slots they
        took over; the header's end then describes entry ``keep - 1`` again."""
        header = self.header
        for n in range(header.index_count - 1, max(keep, 1) - 1, -1):
            key_hash, _, _, prev = self.read_entry(n)
            self._unlink(n, key_hash, prev)
            header.index_count = n
        self._refresh_end(store_time_of)
        _pwrite(self._fd, header.pack(), 0)
        self.dirty = True

    def recover_tail(self) -> int:
        """After a crash: unlink entries written past the header's indexCount. Returns how many."""
        first = n = self.header.index_count
        tail: list[tuple[int, int, int, int]] = []
        while n < self.index_num:  # read ahead in large chunks: the tail can be a second of puts
            want = min(65536, self.index_num - n)
            data = os.pread(self._fd, want * INDEX_ENTRY_SIZE, self._entry_pos(n))
            entries = list(INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % INDEX_ENTRY_SIZE]))
            end = next((i for i, e in enumerate(entries) if e == (0, 0, 0, 0)), None)
            tail += entries[:end]
            n += len(entries)
            if end is not None or len(entries) < want:
                break
        if not tail:
            return 0
        slots = self._slot_table()
        changed = set()
        for i in range(len(tail) - 1, -1, -1):  # newest first: each restores what it replaced
            key_hash, _, _, prev = tail[i]
            slot = key_hash % self.hash_slot_num
            if slots[slot] == first + i:
                slots[slot] = prev
                changed.add(slot)
        for slot in sorted(changed):
            _pwrite(self._fd, _SLOT.pack(slots[slot]), INDEX_HEADER_SIZE + slot * 4)
        _pwrite(self._fd, bytes(len(tail) * INDEX_ENTRY_SIZE), self._entry_pos(first))
        self.dirty = True
        return len(tail)

    def _unlink(self, n: int, key_hash: int, prev: int, *, counted: bool = True) -> None:
        slot_pos = self._slot_pos(key_hash)
        self._slots = None  # (recovery only) the writer reloads the table
        if _SLOT.unpack(os.pread(self._fd, 4, slot_pos))[0] == n:
            os.pwrite(self._fd, _SLOT.pack(prev), slot_pos)
            if counted and prev == 0:
                self.header.hash_slot_count = max(0, self.header.hash_slot_count - 1)
        os.pwrite(self._fd, _EMPTY_ENTRY, self._entry_pos(n))

    def _refresh_end(self, store_time_of: Callable[[int], int]) -> None:
        header = self.header
        if header.index_count <= 1:
            header.end_phy_offset, header.end_timestamp = header.begin_phy_offset, header.begin_timestamp
            return
        _, phy, time_diff, _ = self.read_entry(header.index_count - 1)
        header.end_phy_offset = phy
        exact = store_time_of(phy)  # the entry keeps whole seconds only; the record has the ms
        header.end_timestamp = exact if exact > 0 else header.begin_timestamp + time_diff * 1000

    # ------------------------------------------------------------ reading (no lock)

    def is_time_matched(self, begin: int, end: int) -> bool:
        h = self.header
        return ((begin < h.begin_timestamp and end > h.end_timestamp)
                or h.begin_timestamp <= begin <= h.end_timestamp
                or h.begin_timestamp <= end <= h.end_timestamp)

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """Append the CommitLog offsets of entries whose hash matches ``key`` and whose time is
        within [begin, end], newest first, until ``out`` holds ``max_num``. Hash based: the
        caller (ultimately the client) checks the records' keys."""
        header = self.header
        key_hash = index_key_hash(key)
        count = header.index_count  # read before the slot: a writer links the slot, then counts
        n = self._read_slot(key_hash)
        if n <= 0 or n > count or count <= 0:
            return
        begin_ts = header.begin_timestamp
        while len(out) < max_num:
            hash_read, phy, time_diff, prev = self.read_entry(n)
            if time_diff < 0:
                break
            time_read = begin_ts + time_diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= 0 or prev > count or prev == n or time_read < begin:
                break
            n = prev

    # ------------------------------------------------------------ lifecycle

    def write_header(self) -> None:
        """Publish the header (page cache only): after a process crash, recovery re-links no
        more than what was indexed since."""
        if self.dirty:
            with self._lock:
                packed = self.header.pack()
            _pwrite(self._fd, packed, 0)

    def flush(self) -> None:
        """Write the header and fsync: the header on disk then covers every entry before it."""
        if self.dirty:
            self.dirty = False
            with self._lock:
                packed = self.header.pack()
            fdatasync(self._fd)  # the entries first, so the header never gets ahead of them
            _pwrite(self._fd, packed, 0)
            fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            self._release()

    def _release(self) -> None:
        if isinstance(self._slot_map, mmap.mmap):
            self._slot_map.close()
        self._slot_map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._slots = None

    def unlink(self) -> None:
        """Remove the file; the descriptor stays usable for readers until ``destroy``."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def destroy(self) -> None:
        self._release()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _pwrite(fd: int, data: bytes, pos: int) -> None:
    written = os.pwrite(fd, data, pos)
    if written != len(data):  # a short write only happens when the disk fills up
        raise OSError(28, f"short write to index file ({written} of {len(data)} bytes)")
