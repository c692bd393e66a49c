"""The TimerWheel file (docs/timers.md#timerwheel-slot-24-bytes-big-endian): one slot per
precision step over twice the longest delay, each the head of a chain of TimerLog records.

Slots changed since the last ``sync`` are kept in a small table and written to the file only at
``sync``, so the file always holds the wheel as of some synced TimerLog position (see
``TimerStore``). Reads and writes are positioned; nothing is mapped.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ferrymq.store.mapped_file import fdatasync
from ferrymq.store.timer_log import NO_RECORD

_SLOT = struct.Struct(">qqii")  # slotMs, lastPos, count, reserved
SLOT_SIZE = _SLOT.size  # 24


@dataclass(frozen=True, slots=True)
class Slot:
    slot_ms: int  # the time this slot's chain belongs to (0: never used)
    last_pos: int  # TimerLog position of the newest record of the chain, NO_RECORD if empty
    count: int

    def holds(self, slot_ms: int) -> bool:
        return self.slot_ms == slot_ms and self.count > 0


EMPTY_SLOT = Slot(0, NO_RECORD, 0)


class TimerWheel:
    def __init__(self, path: str, slot_count: int, precision_ms: int) -> None:
        if slot_count <= 0 or precision_ms <= 0:
            raise ValueError("a timer wheel needs at least one slot and a positive precision")
        self.path = path
        self.slot_count = slot_count
        self.precision_ms = precision_ms
        self._fd = -1
        self._dirty: dict[int, Slot] = {}

    def open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = self.slot_count * SLOT_SIZE
        current = os.fstat(self._fd).st_size
        if current not in (0, size):
            raise ValueError(f"{self.path} holds {current} bytes, not {size}: timerMaxDelaySec or timerPrecisionMs "
                             f"changed; delete it to rebuild the wheel from the TimerLog")
        if current == 0:
            os.ftruncate(self._fd, size)  # sparse: unwritten slots read as zeros (empty)

    def close(self) -> None:
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1

    def reset(self) -> None:
        """Empty every slot (before a rebuild from the TimerLog)."""
        self._dirty = {}
        os.ftruncate(self._fd, 0)
        os.ftruncate(self._fd, self.slot_count * SLOT_SIZE)

    def round_down(self, time_ms: int) -> int:
        return time_ms - time_ms % self.precision_ms

    def index(self, slot_ms: int) -> int:
        return (slot_ms // self.precision_ms) % self.slot_count

    def get(self, slot_ms: int) -> Slot:
        """The slot that ``slot_ms`` maps to, whatever round it holds."""
        i = self.index(slot_ms)
        slot = self._dirty.get(i)
        if slot is not None:
            return slot
        slot_ms_, last, count, _ = _SLOT.unpack(os.pread(self._fd, SLOT_SIZE, i * SLOT_SIZE))
        return Slot(slot_ms_, last, count) if count > 0 else EMPTY_SLOT

    def put(self, slot_ms: int, slot: Slot) -> None:
        self._dirty[self.index(slot_ms)] = slot

    @property
    def dirty_count(self) -> int:
        return len(self._dirty)

    def sync(self) -> None:
        """Write the changed slots and fdatasync the file."""
        if self._dirty:
            self.write(dict(self._dirty))
            self.fsync()

    def changed(self) -> dict[int, Slot]:
        """The slots changed since they were last written (a copy: ``write`` takes it)."""
        return dict(self._dirty)

    def write(self, changed: dict[int, Slot]) -> None:
        """Write the slots of ``changed`` (from ``changed``) that are still as they were then,
        and read them from the file from now on. A slot changed again since stays to be written
        with its newer value; one written meanwhile (a full ``sync``) is not written back."""
        dirty = self._dirty
        for i, slot in sorted(changed.items()):
            if dirty.get(i) is slot:
                os.pwrite(self._fd, _SLOT.pack(slot.slot_ms, slot.last_pos, slot.count, 0), i * SLOT_SIZE)
                del dirty[i]

    def fsync(self) -> None:
        fdatasync(self._fd)
