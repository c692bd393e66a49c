"""The store directory's ``lock`` file and ``abort`` marker (docs/wire-format.md#abort-marker-and-lock).

``lock`` keeps a second store off the same directory. ``abort`` exists while a store
runs; finding it at startup means the last run did not shut down cleanly, so recovery
checks more of the CommitLog, with CRCs.
"""

from __future__ import annotations

import fcntl
import os


class StoreLockedError(OSError):
    """Another store (another broker) has the directory: an OSError, so the CLI prints one line."""


class StoreDirLock:
    def __init__(self, root_dir: str) -> None:
        self.lock_path = os.path.join(root_dir, "lock")
        self.abort_path = os.path.join(root_dir, "abort")
        self._fd = -1

    def acquire(self) -> bool:
        """Lock the directory and mark the run as started; returns whether the last run ended cleanly."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # flock, not a POSIX record lock: it also excludes a second store in this process.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"Lock failed,MQ already started ({self.lock_path})") from None
        os.pwrite(fd, b"lock", 0)
        self._fd = fd
        clean = not os.path.exists(self.abort_path)
        with open(self.abort_path, "wb"):
            pass
        return clean

    def release(self, *, clean: bool = True) -> None:
        """Unlock; ``clean`` removes the abort marker (a failed start leaves it as it found it)."""
        if self._fd < 0:
            return
        if clean:
            try:
                os.unlink(self.abort_path)
            except FileNotFoundError:
                pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = -1
