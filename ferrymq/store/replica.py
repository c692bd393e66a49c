"""The store's side of master–slave replication (RocketMQ 4.x HAService): what a master
hands out of its CommitLog, and how a slave writes what it receives.

A master sends its CommitLog as raw bytes in chunks that may split records. A slave keeps
the unfinished tail of a chunk in memory and writes only whole units into its CommitLog:
complete records (checked for a sane layout) and a segment's whole blank tail. So its
CommitLog holds exactly the master's bytes, never a torn record, and its max offset is what
it confirms to the master. The records written go to ConsumeQueue and IndexFile as the
master's put dispatched them: at once, or (``defer_dispatch``) queued for the store's next
``dispatch_pending``, so a slave keeping up confirms a transfer before indexing it, as a
master answers a send before (RocketMQ's slave: its reput thread indexes what it appended).

Synchronous: the broker runs ``ReplicaAppender.append`` on its loop for a small transfer and
in the store's writer thread for a large one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ferrymq.common.message import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    RECORD_HEADER,
    MessageExt,
    SysFlag,
    decode_run,
)
from ferrymq.store.commit_log import CommitLog
from ferrymq.store.dispatch import StoredPut

# Under the CommitLog's lock: a run of records just written (its puts, their store time), and
# whether its dispatch may wait for the store's next dispatch_pending (MessageStore.appended_run).
RunDispatch = Callable[[list[StoredPut], int, bool], None]


class ReplicaDataError(ValueError):
    """Bytes from the master that cannot continue this CommitLog (wrong offset, not records)."""


def read_for_transfer(commit_log: CommitLog, offset: int, limit: int) -> bytes | None:
    """A master: up to ``limit`` CommitLog bytes from ``offset``, never past the end of the
    file holding ``offset`` nor past the last complete record; None if there are none (yet),
    or ``offset`` was deleted."""
    end = min(commit_log.max_offset, commit_log.roll_next_file(offset), offset + limit)
    if end <= offset:
        return None
    return commit_log.get_data(offset, end - offset)


@dataclass
class ReplicaProgress:
    confirmed: int  # the CommitLog's max offset now: what the slave reports to its master
    # (topic, queue id, the queue's new max offset, the messages that arrived there)
    arrivals: list[tuple[str, int, int, list[MessageExt]]] = field(default_factory=list)


def stored_puts(phys: int, msgs: list[MessageExt]) -> Iterator[tuple[int, list[StoredPut]]]:
    """Contiguous records (the first at CommitLog offset ``phys``) as the master's puts that wrote
    them: runs of one store time (a master's put group shares one), each a list of puts (records
    of one queue with consecutive queue offsets), so they are dispatched as the master dispatched
    them, each run's ConsumeQueue entries and index keys with one write per file."""
    puts: list[StoredPut] = []
    store_ts = None
    for m in msgs:
        if m.store_timestamp != store_ts:
            if puts:
                yield store_ts, puts
            puts, store_ts = [], m.store_timestamp
        to_queue = SysFlag.is_dispatched(m.sys_flag)
        last = puts[-1] if puts else None
        if (last is not None and last.topic == m.topic and last.queue_id == m.queue_id and last.to_queue == to_queue
                and (not to_queue or last.queue_offset + len(last.msgs) == m.queue_offset)):
            last.msgs.append(m)
            last.sizes.append(m.store_size)
        else:
            puts.append(StoredPut(m.topic, m.queue_id, m.queue_offset, phys, [m], [m.store_size], to_queue))
        phys += m.store_size
    if puts:
        yield store_ts, puts


class ReplicaAppender:
    """One replication stream into a slave's CommitLog; ``reset`` at each (re)connection."""

    def __init__(self, commit_log: CommitLog, dispatch_run: RunDispatch) -> None:
        self._log = commit_log
        self._dispatch_run = dispatch_run
        self._pending = bytearray()  # received, not yet written: an unfinished record or blank tail
        self._pending_at = commit_log.max_offset  # CommitLog offset of _pending[0]

    def reset(self) -> int:
        """Forget unwritten bytes; returns the offset to ask the master for (the CommitLog's end)."""
        self._pending.clear()
        self._pending_at = self._log.max_offset
        return self._pending_at

    @property
    def expected_offset(self) -> int:
        """Where the master's next chunk must start."""
        return self._pending_at + len(self._pending)

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def append(self, offset: int, data: bytes | bytearray | memoryview, *,
               defer_dispatch: bool = False) -> ReplicaProgress:
        """Take a chunk of the master's CommitLog starting at ``offset``; write and dispatch
        every unit it completes (``defer_dispatch``: queue their dispatch, see above). Raises
        ReplicaDataError when it cannot continue the log (the connection is then dropped and
        started again from the CommitLog's end)."""
        if offset != self.expected_offset:
            if self._log.max_offset == 0 and not self._pending and not self._log.segments:
                self._pending_at = offset  # an empty store takes the master's data from wherever it starts
            else:
                raise ReplicaDataError(f"master sent offset {offset}, expected {self.expected_offset}")
        self._pending += data
        progress = ReplicaProgress(self._log.max_offset)
        arrivals: dict[tuple[str, int], tuple[int, list[MessageExt]]] = {}
        while True:
            run_end, msgs = self._next_run()
            if run_end == 0:
                break
            self._write_run(run_end, msgs, arrivals, defer_dispatch)
        progress.confirmed = self._log.max_offset
        progress.arrivals = [(t, q, mx, msgs) for (t, q), (mx, msgs) in arrivals.items()]
        return progress

    def _next_run(self) -> tuple[int, list[MessageExt]]:
        """The longest prefix of ``_pending`` made of whole units in one segment: (its length, its
        records decoded); (0, []) when not even one unit is complete. The records are decoded in
        one call (``decode_run``); what stopped it is then looked at here: the data's end, a
        record not whole yet, a segment's blank tail, or bytes that are not a record."""
        buf, at, seg_size = self._pending, self._pending_at, self._log.segment_size
        seg_end = at - at % seg_size + seg_size
        pos, msgs = decode_run(buf, 0, min(len(buf), seg_end - at))
        if at + pos >= seg_end or len(buf) - pos < RECORD_HEADER.size:
            return pos, msgs
        total, magic = RECORD_HEADER.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            tail = seg_end - (at + pos)
            if total != tail:
                raise ReplicaDataError(f"blank record at offset {at + pos} says {total} bytes to the end of its "
                                       f"file, {tail} with mappedFileSizeCommitLog {seg_size} (not the master's?)")
            if len(buf) - pos >= tail:  # the whole blank tail is written at once, so the log never ends inside it
                pos += tail
            return pos, msgs
        if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE or at + pos + total > seg_end:
            raise ReplicaDataError(f"no record at offset {at + pos} of the master's data "
                                   f"(magic 0x{magic & 0xFFFFFFFF:08X}, size {total})")
        if len(buf) - pos >= total:  # whole, yet not a record decode_run accepts
            raise ReplicaDataError(f"malformed record at offset {at + pos} of the master's data")
        return pos, msgs  # the next record is not whole yet

    def _write_run(self, run_end: int, msgs: list[MessageExt],
                   arrivals: dict[tuple[str, int], tuple[int, list[MessageExt]]], defer: bool) -> None:
        start = self._pending_at
        chunk = bytes(self._pending) if run_end == len(self._pending) else bytes(self._pending[:run_end])
        dispatch_run, queue_offsets = self._dispatch_run, self._log.queue_offsets

        def dispatch() -> None:  # under the CommitLog's lock, as a put's dispatch
            for store_ts, puts in stored_puts(start, msgs):
                dispatch_run(puts, store_ts, defer)
                for put in puts:
                    if put.to_queue:
                        queue_offsets[f"{put.topic}-{put.queue_id}"] = put.queue_offset + len(put.msgs)

        last_ts = msgs[-1].store_timestamp if msgs else 0
        try:
            self._log.append_copy(start, chunk, last_ts, dispatch)
        except ValueError as exc:
            raise ReplicaDataError(str(exc)) from None
        del self._pending[:run_end]
        self._pending_at = start + run_end
        for m in msgs:
            if SysFlag.is_dispatched(m.sys_flag):
                key = (m.topic, m.queue_id)
                msgs_there = arrivals.get(key, (0, []))[1]
                msgs_there.append(m)
                arrivals[key] = (m.queue_offset + 1, msgs_there)
