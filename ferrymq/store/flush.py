"""Group commit for SYNC_FLUSH (RocketMQ's GroupCommitService).

Puts append in the writer thread and never fsync there. Each put that must wait for the
disk registers (its end offset, a callback) here; one flush thread loops: take every
waiting request, fsync once (which covers everything written so far, so at least each
taken request), call back all of them. Sends that arrive while an fsync runs share the
next one, so under load many acknowledgements ride on each fsync.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

FlushDone = Callable[[bool], None]  # called with True once fsynced, False if the fsync failed


@dataclass
class GroupCommitStats:
    fsyncs: int = 0
    acks: int = 0  # requests answered by those fsyncs (including ones an fsync covered before they asked)
    largest_group: int = 0

    @property
    def acks_per_fsync(self) -> float:
        return self.acks / self.fsyncs if self.fsyncs else 0.0


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], flushed_offset: Callable[[], int], name: str = "store-group-commit") -> None:
        self._flush = flush  # fsyncs what is written, returns the offset now durable
        self._flushed_offset = flushed_offset
        self._cond = threading.Condition()
        self._requests: list[tuple[int, FlushDone]] = []
        self._wakeup = False
        self._stopping = False
        self.stats = GroupCommitStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, offset: int, done: FlushDone) -> None:
        """Call ``done`` once everything below ``offset`` is fsynced (at once if it already is)."""
        if self._flushed_offset() >= offset:  # an fsync that ran meanwhile covered it
            with self._cond:
                self.stats.acks += 1
            done(True)
            return
        with self._cond:
            if self._stopping:
                immediate = True
            else:
                immediate = False
                self._requests.append((offset, done))
                self._cond.notify()
        if immediate:
            done(self._flushed_offset() >= offset)

    def wakeup(self) -> None:
        """Flush soon without anyone waiting (a SYNC_FLUSH message sent with WAIT=false)."""
        with self._cond:
            self._wakeup = True
            self._cond.notify()

    def stop(self) -> None:
        """Answer every waiting request (after one last fsync) and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self._wakeup and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._requests:
                    return
                batch, self._requests, self._wakeup = self._requests, [], False
            try:
                durable = self._flush()
                ok = True
            except OSError as exc:  # the bytes may not be on disk: say so to every waiter
                log.error("CommitLog fsync failed: %s", exc)
                durable, ok = -1, False
            with self._cond:
                self.stats.fsyncs += 1
                self.stats.acks += len(batch)
                self.stats.largest_group = max(self.stats.largest_group, len(batch))
            for offset, done in batch:
                try:
                    done(ok and durable >= offset)
                except Exception:  # a waiter's callback must not stop the flush thread
                    log.exception("group commit callback failed")
