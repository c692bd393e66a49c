"""The POP bookkeeping journal: an append-only file of what happened to received messages.

Records (one JSON object a line, each line prefixed by the CRC32 of its JSON):

- ``P`` a receive (or a redelivery) from one queue: the queue's next unreceived offset and,
  per message, its offset, CommitLog offset, delivery attempt, delivery seq and deadline;
- ``A`` an ack (or a move to the DLQ): the message is done for good;
- ``C`` a change of invisible time: the message's new seq and deadline;
- ``R`` a queue's whole state (next offset and messages in flight), replacing what it had.

Replaying the file in order rebuilds every queue's state. A torn or corrupt line (a crash
mid-write) ends the replay: every line after it was written later, and the writes are
ordered, so nothing after it was acknowledged to anyone.

Durability: records are written and fsynced by one thread, in order, in batches (group
commit: every record queued while one fsync runs shares the next). An ack, a change of
invisible time and a move to the DLQ are answered only after their fsync; a receive
answers as soon as its record is queued (losing it in a power cut only means its messages
are received again, as attempt 1). Compaction: at load, and whenever the file outgrows
``compact_bytes``, the live state is written as a fresh file (tmp, fsync, rename, directory
fsync) and appending continues there.

Why a journal of its own and not records in the CommitLog (RocketMQ writes checkpoint and ack
records to an internal revive topic): an ack answered OK must survive a crash, so it needs an
fsync; in the CommitLog that fsync would come from the store's flush policy (ASYNC_FLUSH by
default, a timed flush), or force one on every send. Here acks get group-committed fsyncs of
their own and sends are untouched. Replay is bounded by the live state (the file is compacted),
where a revive topic must be scanned from its checkpoint and its records merged, and stays
until CommitLog retention. And no internal topic shows up in routes, admin tools or lag. The
cost: the journal is not replicated to slaves. After a failover a POP group resumes from its
consume offset (its first unacknowledged message, which the consumer offset table carries to
slaves): at-least-once, messages acked past that offset are delivered again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger(__name__)

Record = dict


def encode(record: Record) -> bytes:
    text = json.dumps(record, separators=(",", ":"))
    return f"{zlib.crc32(text.encode()):08x} {text}\n".encode()


def decode_lines(data: bytes) -> Iterator[Record]:
    """Records of a journal's bytes, up to the first torn or corrupt line."""
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            check, text = line.split(b" ", 1)
            if int(check, 16) != zlib.crc32(text):
                raise ValueError("checksum mismatch")
            yield json.loads(text)
        except ValueError as exc:
            log.warning("pop journal: stopping replay at a damaged line (%s); later lines are ignored", exc)
            return


class PopJournal:
    def __init__(self, directory: Path, *, compact_bytes: int = 64 * 1024 * 1024) -> None:
        self.directory = directory
        self.path = directory / "journal"
        self.compact_bytes = compact_bytes
        self.size = 0  # bytes in the file now (loop's view: written batches only)
        self.fsyncs = 0
        self.compactions = 0
        self._snapshot_size = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pop-journal")
        self._fd: int | None = None
        self._pending: list[bytes] = []
        self._waiters: list[asyncio.Future] = []
        self._rewrite = False  # the next batch replaces the file (compaction)
        self._flusher: asyncio.Task | None = None
        self._closed = False
        # Called when the file outgrows compact_bytes: returns the live state as records.
        self.snapshot: Callable[[], list[Record]] | None = None

    async def load(self) -> list[Record]:
        """Every record of the file (nothing is written until ``open``)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read)

    def _read(self) -> list[Record]:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return list(decode_lines(data))

    async def open(self, snapshot: list[Record]) -> None:
        """Start appending, to a file that holds ``snapshot`` (the replayed state, compacted)."""
        payload = b"".join(map(encode, snapshot))
        self._snapshot_size = len(payload)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._write_batch, payload, True)
        self.size = len(payload)

    def append(self, record: Record) -> asyncio.Future:
        """Queue ``record``; the future resolves once it is fsynced (or fails with the I/O error)."""
        if self._closed:
            raise RuntimeError("the pop journal is closed")
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(encode(record))
        self._waiters.append(fut)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush(), name="pop-journal-flush")
        return fut

    def request_compaction(self, snapshot: list[Record]) -> None:
        """Replace what is queued by ``snapshot`` (which already reflects it) and start the next
        batch as a fresh file."""
        self._pending = [b"".join(map(encode, snapshot))]
        self._snapshot_size = len(self._pending[0])
        self._rewrite = True
        self.compactions += 1

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            # compact once the file is well past what a snapshot of the live state takes (a large
            # in-flight set alone must not make every batch a compaction)
            if (not self._rewrite and self.snapshot is not None
                    and self.size > max(self.compact_bytes, 4 * self._snapshot_size)):
                self.request_compaction(self.snapshot())
            batch, waiters, rewrite = b"".join(self._pending), self._waiters, self._rewrite
            self._pending, self._waiters, self._rewrite = [], [], False
            try:
                await loop.run_in_executor(self._executor, self._write_batch, batch, rewrite)
            except OSError as exc:
                log.error("pop journal write failed: %s", exc)
                for fut in waiters:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.size = len(batch) if rewrite else self.size + len(batch)
            self.fsyncs += 1
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def _write_batch(self, data: bytes, rewrite: bool) -> None:
        if rewrite:
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            os.replace(tmp, self.path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            if self._fd is not None:
                os.close(self._fd)
            self._fd = fd
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _write_all(self._fd, data)
        os.fsync(self._fd)

    async def close(self) -> None:
        """Write what is queued, then close the file."""
        self._closed = True
        if self._flusher is not None:
            try:
                await self._flusher
            except Exception as exc:  # already logged by the waiters' owners
                log.error("pop journal: last flush failed: %s", exc)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_fd)
        self._executor.shutdown(wait=False)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
