"""Fixed-size segment files and the directory of segments they form.

A segment is named by the absolute offset of its first byte (20 digits) and created at
full size as a sparse file, so a segment's size never changes and offsets map to
(segment, position) by arithmetic. Data goes in with os.pwrite and comes out with
os.pread: both are thread-safe and release the GIL, and a failed write (disk full)
is an OSError rather than the SIGBUS an mmap store would take on a sparse file. Records
known to be in the page cache may also be copied out of a read-only mapping of the whole
segment (``view``): only their own bytes, where a pread of a span copies everything between
them. A segment therefore never shrinks while the store runs (a mapping must never point
past the file's end): ``truncate`` punches a hole, or writes zeros, instead.

Concurrency contract: one writer at a time (the caller's lock); any number of readers.
``write_position`` moves only after the bytes are in the file, so a reader that stays
below it sees only complete data. The segment list is replaced, never mutated, so a
reader holding a snapshot is never confused by a concurrent roll or delete.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import re
import sys
import threading
import time

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096  # flush*LeastPages count pages of this size
_SEGMENT_NAME = re.compile(r"^\d{20}$")
_CLOSE_GRACE_S = 30.0  # a deleted segment's fd stays open this long for in-flight readers

_CLOSED = -2

fdatasync = getattr(os, "fdatasync", os.fsync)  # size never changes, so data-only sync suffices


class NotCached(Exception):
    """A read asked only for page-cache data (``nowait``) and some of it is on disk."""


# preadv(RWF_NOWAIT) (Linux 4.14+) reads only what the page cache holds; where the file system
# does not support it, every such read answers NotCached and the caller reads in its pool.
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)
_nowait_reads = _RWF_NOWAIT is not None and hasattr(os, "preadv")


def read_cached(fd: int, length: int, pos: int) -> bytes:
    """``length`` bytes at ``pos`` if the page cache holds every one of them, else NotCached:
    never waits for the disk (a short read means part of the range is not cached)."""
    global _nowait_reads
    if not _nowait_reads:
        raise NotCached
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], pos, _RWF_NOWAIT)
    except BlockingIOError:
        raise NotCached from None
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        _nowait_reads = False
        log.info("this file system does not read page-cache-only (RWF_NOWAIT): older data is read in the pool")
        raise NotCached from None
    if got != length:
        raise NotCached
    return bytes(buf)


class _CacheRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


_SYS_CACHESTAT = 451  # cachestat(2), Linux 6.5+ (the same number on x86-64 and arm64)


def _libc_function(name: str):
    """A function of the C library (errno kept for ctypes.get_errno), None where there is none."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


def _load_cachestat():
    syscall = _libc_function("syscall") if sys.platform.startswith("linux") else None
    if syscall is None:
        return None
    syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(_CacheRange), ctypes.POINTER(_CacheStat),
                        ctypes.c_uint]
    syscall.restype = ctypes.c_long
    return syscall


_cachestat = _load_cachestat()


def page_cache_holds(fd: int, pos: int, length: int) -> bool:
    """Whether the page cache holds every page of ``length`` bytes at ``pos`` (one cachestat
    call: a mapping's pages can then be copied without a disk read). False where the kernel
    cannot tell (older than 6.5, or a sandbox refusing the call): the caller reads in its pool."""
    global _cachestat
    if _cachestat is None or length <= 0:
        return _cachestat is not None
    first, last = pos // OS_PAGE_SIZE, (pos + length - 1) // OS_PAGE_SIZE
    stat = _CacheStat()
    if _cachestat(_SYS_CACHESTAT, fd, ctypes.byref(_CacheRange(pos, length)), ctypes.byref(stat), 0) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP):
            _cachestat = None
            log.info("cachestat(2) is not available here (%s): records past a queue's newest entries are "
                     "read in the pool", os.strerror(err))
        return False
    return stat.nr_cache >= last - first + 1


def _load_fallocate():
    fallocate = _libc_function("fallocate")
    if fallocate is None:  # not Linux (or no libc symbol): zeros are written instead
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    return fallocate


_fallocate = _load_fallocate()
_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE
_PUNCH_HOLE = 0x02 | _KEEP_SIZE  # FALLOC_FL_PUNCH_HOLE
RESERVE_AHEAD = 4 << 20  # how far ahead of an appending writer blocks are allocated
_ZEROS = bytes(1 << 20)


def punch_hole(fd: int, pos: int, length: int) -> bool:
    """Zero ``length`` bytes from ``pos`` and free their blocks, keeping the file's size; False
    where the file system (or the platform) cannot."""
    if length <= 0:
        return True  # nothing to zero
    if _fallocate is None:
        return False
    if _fallocate(fd, _PUNCH_HOLE, pos, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, f"punching a hole: {os.strerror(err)}")


def allocate_blocks(fd: int, pos: int, length: int) -> bool:
    """Allocate the blocks of ``length`` bytes from ``pos`` (they read as zeros; the file's size
    is unchanged). False where the file system cannot or the disk has no room: the writes that
    follow then allocate as they go, and meet a full disk themselves."""
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, _KEEP_SIZE, pos, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENOSPC, errno.EDQUOT):
        return False
    raise OSError(err, f"allocating blocks: {os.strerror(err)}")


class AheadAllocator:
    """Allocates a sparse file's blocks a few MiB ahead of a writer that appends.

    A write into blocks the file system has already allocated costs a fraction of one that
    allocates them (ext4's delayed allocation does its bookkeeping per write call: 1.2 KiB
    appends measured 9.6 against 1.8 µs here), so appends go into blocks allocated
    ``ahead`` bytes at a time, never the whole file at once: the disk guard keeps counting
    what was written, give or take one chunk per file being written."""

    def __init__(self, size: int, ahead: int = RESERVE_AHEAD) -> None:
        self.size = size
        self.ahead = ahead
        self.allocated = 0  # blocks below this are allocated

    def before_write(self, fd: int, pos: int, end: int) -> None:
        """Called before writing [pos, end): allocates the next chunk when the write reaches
        past what is allocated. A refusal (no room, no support) is retried a chunk further on."""
        if end > self.allocated:
            start = max(pos, self.allocated)
            stop = min(self.size, max(end, start + self.ahead))
            allocate_blocks(fd, start, stop - start)
            self.allocated = stop

    def forget_from(self, pos: int) -> None:
        """The file was cut back to ``pos`` (a hole punched): allocate again from there."""
        self.allocated = min(self.allocated, pos)


def _write_zeros(fd: int, pos: int, end: int) -> None:
    while pos < end:
        pos += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - pos)], pos)


def segment_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


class MappedFile:
    """One segment: ``size`` bytes holding offsets [start_offset, start_offset + size)."""

    def __init__(self, path: str, start_offset: int, size: int, *, create: bool = False) -> None:
        self.path = path
        self.start_offset = start_offset
        self.size = size
        self.write_position = 0
        self.flushed_position = 0
        self._fd = -1
        self._allocator = AheadAllocator(size)
        self._view: memoryview | None = None  # the read-only mapping, made by the first ``view``
        self._open_lock = threading.Lock()
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, size)  # sparse: blocks are allocated as data arrives
            except BaseException:
                os.close(fd)
                os.unlink(path)
                raise
            self._fd = fd
        else:
            actual = os.path.getsize(path)
            if actual > size:
                raise ValueError(f"segment {path} is {actual} bytes, expected {size} (was the file size setting changed?)")
            if actual < size:
                # A file cut short (a crash while the file system extended it, a copy that stopped):
                # what is missing reads as zeros, as RocketMQ's mmap of the full size would; recovery
                # then finds where valid records end.
                log.warning("segment %s is %d bytes, expected %d: reading the missing %d bytes as empty",
                            path, actual, size, size - actual)
                os.truncate(path, size)

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.write_position

    @property
    def fd(self) -> int:
        # Opened lazily: a store with years of segments keeps descriptors only for those in use.
        fd = self._fd
        if fd < 0:
            with self._open_lock:
                if self._fd == _CLOSED:
                    raise ValueError(f"segment {self.path} is closed")
                if self._fd < 0:
                    self._fd = os.open(self.path, os.O_RDWR)
                fd = self._fd
        return fd

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write at the write position; returns the file position written at. Caller holds the write lock."""
        pos = self.write_position
        end = pos + len(data)
        if end > self.size:
            raise ValueError(f"{len(data)} bytes do not fit in {self.path} at {pos}")
        self.write_at(pos, data)
        self.write_position = end
        return pos

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Raw positional write that does not move write_position (used to stamp blanks, and by a
        slave copying its master's bytes); into blocks allocated ahead when it is at the end."""
        fd = self.fd
        if pos + len(data) > self._allocator.allocated:
            self._allocator.before_write(fd, pos, pos + len(data))
        written = os.pwrite(fd, data, pos)
        while written < len(data):  # short writes are rare (signals, quotas); finish the job
            data, pos = memoryview(data)[written:], pos + written
            written = os.pwrite(fd, data, pos)

    def read(self, pos: int, length: int, *, nowait: bool = False) -> bytes:
        """Up to ``length`` bytes from ``pos``, never past the written data. ``nowait``: only
        from the page cache, NotCached when part of it is on disk (``read_cached``)."""
        length = min(length, self.write_position - pos)
        if length <= 0 or pos < 0:
            return b""
        try:
            if nowait:
                return read_cached(self.fd, length, pos)
            return os.pread(self.fd, length, pos)  # the file never shrinks, so this is never short
        except (FileNotFoundError, ValueError):  # deleted (or closed) under a late reader: gone
            return b""

    def view(self) -> memoryview:
        """The whole segment mapped read-only (made on first use): slicing it copies nothing;
        copying from it holds the GIL, so only for data in the page cache. Valid below
        ``write_position`` as ``read`` is; it stays valid for whoever holds it after ``close``."""
        view = self._view
        if view is None:
            fd = self.fd
            with self._open_lock:
                if self._fd == _CLOSED:
                    raise ValueError(f"segment {self.path} is closed")
                if self._view is None:
                    self._view = memoryview(mmap.mmap(fd, self.size, prot=mmap.PROT_READ))
                view = self._view
        return view

    def read_raw(self, pos: int, length: int) -> bytes:
        """Bytes as they are on disk, ignoring write_position (recovery looks past it)."""
        return os.pread(self.fd, max(0, min(length, self.size - pos)), pos)

    def flush(self) -> None:
        written = self.write_position
        if self.flushed_position < written:
            fdatasync(self.fd)
            self.flushed_position = written

    def truncate(self, pos: int) -> None:
        """Forget everything from ``pos`` on and zero it on disk, keeping the file's size (a
        mapping of it must never point past its end): a hole punched where the file system can
        (sparse again), else zeros written over what was written; a segment nobody mapped is
        shrunk and regrown instead."""
        fd = self.fd
        if not punch_hole(fd, pos, self.size - pos):
            with self._open_lock:  # no mapping appears meanwhile
                if self._view is None:
                    os.ftruncate(fd, pos)
                    os.ftruncate(fd, self.size)
                else:
                    _write_zeros(fd, pos, max(pos, min(self.write_position, self.size)))
        self.write_position = pos
        self.flushed_position = min(self.flushed_position, pos)
        self._allocator.forget_from(pos)

    def close(self) -> None:
        with self._open_lock:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = _CLOSED  # for good: a late reader must not reopen (and leak) it
            self._view = None  # unmapped once nobody holds it (or a slice of it) any more

    def last_modified_ms(self) -> int:
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, write_position={self.write_position})"


class MappedFileQueue:
    """The segments of one directory, contiguous and equally sized."""

    def __init__(self, directory: str, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self._segments: list[MappedFile] = []
        self._retired: list[tuple[float, MappedFile]] = []
        self._flush_lock = threading.Lock()
        # Guards replacing the segment list: the writer adds at the end while the retention
        # thread removes from the front.
        self._list_lock = threading.Lock()

    def load(self) -> None:
        """Open the existing segments; each is assumed full until recovery says otherwise."""
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if _SEGMENT_NAME.match(n))
        segments = []
        for name in names:
            seg = MappedFile(os.path.join(self.directory, name), int(name), self.segment_size)
            if segments and seg.start_offset != segments[-1].end_offset:
                raise ValueError(f"segment gap in {self.directory}: {segments[-1].path} is followed by {name}")
            seg.write_position = seg.flushed_position = seg.size
            segments.append(seg)
        self._segments = segments

    @property
    def segments(self) -> list[MappedFile]:
        """A snapshot; safe to iterate while the writer rolls or deletes."""
        return self._segments

    def first(self) -> MappedFile | None:
        segs = self._segments
        return segs[0] if segs else None

    def last(self) -> MappedFile | None:
        segs = self._segments
        return segs[-1] if segs else None

    def create_next(self, start_offset: int | None = None) -> MappedFile:
        """Append a new segment after the last one (or at ``start_offset`` when there is none)."""
        last = self.last()
        if last is not None:
            start = last.end_offset
        else:
            start = 0 if start_offset is None else start_offset - start_offset % self.segment_size
        os.makedirs(self.directory, exist_ok=True)
        seg = MappedFile(os.path.join(self.directory, segment_name(start)), start, self.segment_size, create=True)
        with self._list_lock:
            self._segments = [*self._segments, seg]
        return seg

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding ``offset``, or None when it is outside every segment."""
        segs = self._segments
        if not segs or offset < segs[0].start_offset:
            return None
        index = (offset - segs[0].start_offset) // self.segment_size
        return segs[index] if index < len(segs) else None

    @property
    def min_offset(self) -> int:
        first = self.first()
        return first.start_offset if first else 0

    @property
    def max_offset(self) -> int:
        """Offset just after the last written byte."""
        last = self.last()
        return last.start_offset + last.write_position if last else 0

    def truncate_dirty(self, offset: int) -> None:
        """Drop all data at and after ``offset``: zero its tail in its segment, delete later segments."""
        for seg in reversed(self._segments):
            if seg.end_offset <= offset:
                break
            if seg.start_offset <= offset:
                seg.truncate(offset - seg.start_offset)
            else:
                self.delete(seg)

    def delete(self, seg: MappedFile) -> None:
        """Remove a segment. Its descriptor is closed later so an in-flight pread cannot
        hit a closed (or, worse, reused) file descriptor."""
        with self._list_lock:
            self._segments = [s for s in self._segments if s is not seg]
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
        now = time.monotonic()
        self._retired.append((now, seg))
        keep = []
        for retired_at, old in self._retired:
            if now - retired_at > _CLOSE_GRACE_S:
                old.close()
            else:
                keep.append((retired_at, old))
        self._retired = keep

    def flush(self) -> int:
        """fsync every segment with unflushed data; returns the offset now durable."""
        with self._flush_lock:
            durable = self.max_offset
            for seg in self._segments:
                if seg.flushed_position < seg.write_position:
                    seg.flush()
            return durable

    def dirty_pages(self) -> int:
        """Pages written but not yet fsynced, counted as RocketMQ's isAbleToFlush does."""
        return sum(s.write_position // OS_PAGE_SIZE - s.flushed_position // OS_PAGE_SIZE
                   for s in self._segments if s.flushed_position < s.write_position)

    def delete_expired_by_time(self, expired_ms: int, now_ms: int, *, at_once: bool, max_files: int,
                               keep_from: int | None = None) -> list[MappedFile]:
        """Delete the oldest segments whose last write is ``expired_ms`` old (all of them when
        ``at_once``), never the newest one; stops at the first one still young, or holding
        ``keep_from`` or anything after it."""
        deleted = []
        for seg in self._segments[:-1]:
            if len(deleted) >= max_files:
                break
            if not at_once and seg.last_modified_ms() + expired_ms > now_ms:
                break
            if keep_from is not None and seg.end_offset > keep_from:
                break
            self.delete(seg)
            deleted.append(seg)
        return deleted

    def delete_leading(self, expired) -> list[MappedFile]:
        """Delete segments from the front while ``expired(segment)``, never the newest one."""
        deleted = []
        for seg in self._segments[:-1]:
            if not expired(seg):
                break
            self.delete(seg)
            deleted.append(seg)
        return deleted

    def close(self) -> None:
        for seg in self._segments:
            seg.close()
        for _, seg in self._retired:
            seg.close()
        self._retired = []
