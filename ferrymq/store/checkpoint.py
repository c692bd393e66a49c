"""The store's ``checkpoint`` file (docs/wire-format.md#checkpoint): how far each kind of data is durable.

A 4 KiB file holding, big-endian, the store timestamp of the newest record whose bytes
are fsynced in the CommitLog (@0), in the ConsumeQueues (@8) and in the IndexFiles (@16).
After an unclean exit, recovery re-checks the CommitLog from the last segment whose first
record is older than min(those) - 3 s, so everything before it needs no re-check.

@24 holds the CommitLog offset the last fsync covered. RocketMQ 4.9 leaves that slot
unused (5.x keeps its flushed offset, ``masterFlushedOffset``, there); recovery does not
depend on it, but it tells a crash test exactly which bytes a power cut could have lost.

@32 holds the confirm offset of a controller-mode master (what every in-sync replica held,
the store's visibility limit: docs/failover.md), 0 when none was set; Apache 5 keeps its
confirmPhyOffset there. A broker restarted in controller mode serves no query or view of
records past it until the controller has given it its role (and it has cut what the group does
not keep). It moves forward with the acknowledgements and is written by the checkpoint's next
write (a flush): an older value only holds back more.

@40 holds a copy of the timing store's fired-up-to time (docs/timers.md#a-lost-timer-directory):
outside ``timer/``, so a lost timer directory is rebuilt without firing again what was fired.
0: none recorded.

Every other value written here describes data already fsynced, so the file itself need not be
fsynced together with that data: an older checkpoint only makes recovery check more.
"""

from __future__ import annotations

import os
import struct
import threading

from ferrymq.store.mapped_file import fdatasync

CHECKPOINT_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqqq")  # the four of RocketMQ 4, confirm offset @32, timers fired @40
RECOVERY_SAFETY_MS = 3000  # RocketMQ's margin for store clocks that are not monotonic


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._fd, _LAYOUT.size, 0)
        if len(data) < _LAYOUT.size:
            data = data.ljust(_LAYOUT.size, b"\0")
        if os.fstat(self._fd).st_size < CHECKPOINT_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_SIZE)
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
         self.physic_flushed_offset, self.confirm_offset, self.timer_fired_ms) = _LAYOUT.unpack(data)  # fmt: skip

    def min_timestamp(self) -> int:
        """Records stored before this are in both the CommitLog and the ConsumeQueues on disk."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - RECOVERY_SAFETY_MS)

    def min_timestamp_index(self) -> int:
        """As min_timestamp, and in the IndexFiles too."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def commit_log_flushed(self, offset: int, store_timestamp: int) -> None:
        """Record a CommitLog fsync (written to the page cache only, see the module docstring)."""
        with self._lock:
            if store_timestamp > 0:
                self.physic_msg_timestamp = store_timestamp
            self.physic_flushed_offset = max(self.physic_flushed_offset, offset)
            self._write()

    def logics_flushed(self, logics_timestamp: int, index_timestamp: int) -> None:
        """Record a flush of every ConsumeQueue and IndexFile, and make the file durable."""
        with self._lock:
            if logics_timestamp > 0:
                self.logics_msg_timestamp = logics_timestamp
            if index_timestamp > 0:
                self.index_msg_timestamp = index_timestamp
            self._write()
            fdatasync(self._fd)

    def confirmed(self, offset: int) -> None:
        """Note the confirm offset (0: none). Not written here: the caller is the event loop,
        and a flush may hold the lock through an fsync; the checkpoint's next write (a
        CommitLog or ConsumeQueue flush, or the close) carries it."""
        self.confirm_offset = offset

    def timers_fired(self, fired_ms: int) -> None:
        """Copy the timing store's fired-up-to time (forward only; durable with the next fsync)."""
        with self._lock:
            if fired_ms > self.timer_fired_ms:
                self.timer_fired_ms = fired_ms
                self._write()

    def reset_flushed_offset(self, offset: int) -> None:
        """After recovery truncated the CommitLog below the recorded offset."""
        with self._lock:
            self.physic_flushed_offset = offset
            self._write()

    def rewind(self, offset: int, store_timestamp: int) -> None:
        """The CommitLog was truncated at ``offset``, its last record now stored at
        ``store_timestamp``: nothing newer may count as flushed or dispatched any more (records
        copied in after a truncation can carry older store times than the ones dropped)."""
        with self._lock:
            self.physic_flushed_offset = min(self.physic_flushed_offset, offset)
            self.confirm_offset = min(self.confirm_offset, offset)
            self.physic_msg_timestamp = min(self.physic_msg_timestamp, store_timestamp)
            self.logics_msg_timestamp = min(self.logics_msg_timestamp, store_timestamp)
            self.index_msg_timestamp = min(self.index_msg_timestamp, store_timestamp)
            self._write()
            fdatasync(self._fd)

    def _write(self) -> None:
        os.pwrite(self._fd, _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                         self.index_msg_timestamp, self.physic_flushed_offset,
                                         self.confirm_offset, self.timer_fired_ms), 0)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                fdatasync(self._fd)
                os.close(self._fd)
                self._fd = -1


def read_checkpoint(path: str) -> dict[str, int]:
    """The checkpoint's fields, for tools and tests (no store needs to be open)."""
    with open(path, "rb") as f:
        values = _LAYOUT.unpack(f.read(_LAYOUT.size))
    names = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "physicFlushedOffset",
             "confirmPhyOffset", "timerFiredMs")
    return dict(zip(names, values))
