"""From CommitLog records to ConsumeQueue entries and IndexFile keys (RocketMQ's
CommitLogDispatcherBuildConsumeQueue and ...BuildIndex), and the table of ConsumeQueues.

One dispatcher serves every path that makes records visible: a put (under the CommitLog's
write lock, right after the append), recovery (records found past the checkpoint, or a
lost ConsumeQueue rebuilt), and later replication.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ferrymq.common import speedups
from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import MessageExt, Prop, SysFlag
from ferrymq.common.protocol import SCHEDULE_TOPIC, TIMER_TOPIC
from ferrymq.store.consume_queue import CQ_ENTRY, ConsumeQueue
from ferrymq.store.index_service import IndexService, index_postings
from ferrymq.store.timer_store import TimerStore


def timer_entries(msgs: Sequence[MessageExt], sizes: Sequence[int], phys: int,
                  markers: set[int] | None = None, store_ts: int | None = None) -> list[tuple[int, int, int, str, int]]:
    """(due time, CommitLog offset, size, real topic, store time) of contiguous timer-topic
    records starting at ``phys`` (store time: ``store_ts``, else each record's own); a record
    without a readable TIMER_OUT_MS is due at once (0). The CommitLog offsets of recall markers
    (docs/timers.md#recall) are added to ``markers``."""
    out = []
    for m, size in zip(msgs, sizes):
        try:
            due = int(m.properties.get(Prop.TIMER_OUT_MS, "0"))
        except ValueError:
            due = 0
        out.append((due, phys, size, m.properties.get(Prop.REAL_TOPIC, ""),
                    m.store_timestamp if store_ts is None else store_ts))
        if markers is not None and Prop.TIMER_DEL_UNIQKEY in m.properties:
            markers.add(phys)
        phys += size
    return out


def tag_hash(props: dict[str, str]) -> int:
    """A message's tagsCode outside the delay topic: the Java hashCode of its TAGS (0 if none)."""
    tags = props.get(Prop.TAGS)
    return java_string_hash(tags) if tags else 0


def py_queue_entries(msgs: Sequence[MessageExt], sizes: Sequence[int], phys: int) -> bytes:
    """The ConsumeQueue entries (CommitLog offset, size, tagsCode: ``tag_hash``) of contiguous
    records starting at ``phys``, outside the delay topic."""
    entries = []
    for m, size in zip(msgs, sizes):
        entries.append(CQ_ENTRY.pack(phys, size, tag_hash(m.properties)))
        phys += size
    return b"".join(entries)


_native = speedups.load("ferrymq.common._message_codec")
queue_entries = _native.queue_entries if _native is not None else py_queue_entries


class ConsumeQueueTable:
    """Every ConsumeQueue of the store, by (topic, queue id). Queues are created only by the
    writer (under the CommitLog's write lock) or during load; readers look up without a lock."""

    def __init__(self, root_dir: str, file_size: int) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        """Open every queue found under the root directory."""
        os.makedirs(self.root_dir, exist_ok=True)
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in os.listdir(topic_dir):
                if name.isdigit() and os.path.isdir(os.path.join(topic_dir, name)):
                    self.get_or_create(topic, int(name)).load()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.root_dir, topic, queue_id, self.file_size)
            self._queues[(topic, queue_id)] = cq
        return cq

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._queues

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))  # a snapshot: the writer may add queues meanwhile

    def newest(self) -> ConsumeQueue | None:
        """The queue whose last entry points furthest into the CommitLog."""
        return max(self, key=lambda cq: cq.max_phys_end, default=None)

    def max_offsets(self) -> dict[str, int]:
        """``topic-queueId`` -> next queue offset (the CommitLog's offset table after recovery)."""
        return {f"{t}-{q}": cq.max_offset for (t, q), cq in list(self._queues.items())}

    def topic_queue_ids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, queue_id in sorted(list(self._queues)):
            out.setdefault(topic, []).append(queue_id)
        return out

    def flush(self, least_pages: int = 0) -> None:
        for cq in self:
            cq.flush(least_pages)

    def close(self) -> None:
        for cq in self:
            cq.flush()
            cq.close()

    def reset(self) -> None:
        """Close and delete every queue (before a rebuild from the CommitLog)."""
        for cq in self:
            cq.close()
        self._queues = {}
        shutil.rmtree(self.root_dir, ignore_errors=True)


@dataclass(slots=True)
class StoredPut:
    """Where one put's records went: contiguous records of one queue."""

    topic: str
    queue_id: int
    queue_offset: int  # of the first record
    phys: int  # CommitLog offset of the first record
    msgs: Sequence[MessageExt]
    sizes: Sequence[int]
    to_queue: bool  # False: prepared/rollback transaction records get no ConsumeQueue entry

    @property
    def end(self) -> int:
        """The CommitLog offset just past its last record."""
        return self.phys + sum(self.sizes)


class Dispatcher:
    """Writes the ConsumeQueue entries and index keys of records in the CommitLog."""

    def __init__(self, queues: ConsumeQueueTable, index: IndexService | None, delay_levels_ms: Sequence[int],
                 timers: TimerStore | None = None) -> None:
        self.queues = queues
        self.index = index
        self.timers = timers  # the timing store, fed with the timer topic's records (docs/timers.md)
        self._delay_ms = list(delay_levels_ms)
        self.last_dispatched_ts = 0  # store time of the newest record dispatched (the checkpoint's logics time)

    def appended_run(self, puts: Sequence["StoredPut"], store_ts: int) -> None:
        """Puts written together (in CommitLog order): each queue's entries with one write,
        then every key with one. If indexing fails the entries are taken back, so puts that
        failed leave nothing visible."""
        by_queue: dict[tuple[str, int], list[StoredPut]] = {}
        for put in puts:
            if put.to_queue:
                by_queue.setdefault((put.topic, put.queue_id), []).append(put)
        written: list[tuple[str, int]] = []
        try:
            for (topic, queue_id), queue_puts in by_queue.items():
                self._queue_entries(topic, queue_id, queue_puts, store_ts)
                written.append((topic, queue_id))
            if self.index is not None:
                postings: list[tuple[str, int]] = []
                for put in puts:
                    index_postings(put.topic, put.msgs, put.sizes, put.phys, postings)
                self.index.add_postings(postings, store_ts)
            if self.timers is not None:
                markers: set[int] = set()
                due = [e for put in puts if put.topic == TIMER_TOPIC and put.to_queue
                       for e in timer_entries(put.msgs, put.sizes, put.phys, markers, store_ts)]
                if due:
                    self.timers.add(due, markers)
        except BaseException:
            for topic, queue_id in written:
                self.queues.get_or_create(topic, queue_id).truncate_to(by_queue[topic, queue_id][0].queue_offset)
            raise
        self.last_dispatched_ts = store_ts

    def queue_entries(self, topic: str, queue_id: int, queue_offset: int, phys: int, msgs: Sequence[MessageExt],
                      sizes: Sequence[int], store_ts: int) -> None:
        """Append the ConsumeQueue entries (offset, size, tagsCode) of contiguous records; a
        queue that already has an entry for ``queue_offset`` ignores it (recovery)."""
        self._queue_entries(topic, queue_id, [StoredPut(topic, queue_id, queue_offset, phys, msgs, sizes, True)], store_ts)

    def _queue_entries(self, topic: str, queue_id: int, puts: Sequence["StoredPut"], store_ts: int) -> None:
        """The entries of puts to one queue with consecutive queue offsets, in one write."""
        if topic == SCHEDULE_TOPIC:  # tagsCode is when each message is due
            entries = []
            for put in puts:
                phys = put.phys
                for m, size in zip(put.msgs, put.sizes):
                    entries.append(CQ_ENTRY.pack(phys, size, self.tags_code(topic, m.properties, store_ts)))
                    phys += size
        else:
            entries = [queue_entries(put.msgs, put.sizes, put.phys) for put in puts]
        last = puts[-1]
        self.queues.get_or_create(topic, queue_id).append(puts[0].queue_offset, b"".join(entries),
                                                          last.phys + sum(last.sizes))

    def record_entry(self, m: MessageExt, phys: int) -> None:
        """The ConsumeQueue entry of one record read back from the CommitLog (recovery, a
        slave's replication), unless it is a prepared/rollback transaction record."""
        if SysFlag.is_dispatched(m.sys_flag):
            self.queue_entries(m.topic, m.queue_id, m.queue_offset, phys, [m], [m.store_size], m.store_timestamp)
            if m.topic == TIMER_TOPIC and self.timers is not None:
                markers: set[int] = set()
                self.timers.add(timer_entries([m], [m.store_size], phys, markers), markers)  # indexed: skipped

    def index_record(self, m: MessageExt, phys: int, store_ts: int) -> None:
        if self.index is not None:
            self.index.build_index(m.topic, m.sys_flag, m.properties, phys, store_ts)

    def tags_code(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        """The hash of the TAGS property; for the delay topic, the time the message is due."""
        if topic == SCHEDULE_TOPIC:
            try:
                level = min(int(props.get(Prop.DELAY, 0)), len(self._delay_ms))
            except ValueError:
                level = 0
            if level > 0:
                return store_ts + self._delay_ms[level - 1]
        return tag_hash(props)

