"""A broker's epoch file (failover, issue 13): which epochs of its broker group its CommitLog
took part in and where each began, ``[{"epoch": 1, "startOffset": 0}, ...]`` in
``<storePathRootDir>/epochs.json``, beside the store.

The controller bumps the epoch each time it makes a broker the group's master and records
the CommitLog offset where that master's epoch starts. A broker appends an entry when it
becomes master or starts to follow a master of a newer epoch, after any truncation the
controller asked for; the controller compares the broker's last epoch with its history to
tell a returning broker how much of its CommitLog the group still shares.

Written whole to a temporary file, fsynced and renamed (a crash leaves the old or the new
list, never half of one). Plain file I/O: the broker calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "epochs.json"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochFileError(ValueError):
    """The epoch file exists but is not a list of epochs (hand-edited, or not ours)."""


class EpochFile:
    def __init__(self, store_dir: str | Path) -> None:
        self.path = Path(store_dir) / FILE_NAME
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            raw = []
        except ValueError as exc:
            raise EpochFileError(f"{self.path}: not JSON ({exc})") from None
        try:
            entries = [EpochEntry(int(e["epoch"]), int(e["startOffset"])) for e in raw]
        except (TypeError, KeyError, ValueError):
            raise EpochFileError(f"{self.path}: expected a list of {{epoch, startOffset}}") from None
        if any(b.epoch <= a.epoch or b.start_offset < a.start_offset for a, b in zip(entries, entries[1:])):
            raise EpochFileError(f"{self.path}: epochs and their start offsets must increase")
        self.entries = entries
        return entries

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """Record ``epoch`` starting at ``start_offset``; entries of that epoch or later (left by
        an earlier try) are replaced, as are entries starting past ``start_offset`` (truncated away)."""
        kept = [e for e in self.entries if e.epoch < epoch and e.start_offset <= start_offset]
        self._write([*kept, EpochEntry(epoch, start_offset)])

    def _write(self, entries: list[EpochEntry]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = json.dumps([{"epoch": e.epoch, "startOffset": e.start_offset} for e in entries], indent=1)
        with open(tmp, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.entries = entries
