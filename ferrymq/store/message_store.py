"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore, minus the threads).

Synchronous and thread-safe: the broker calls it from worker threads. A put encodes
outside the write lock, then appends to the CommitLog and indexes the ConsumeQueue
under it, so by the time put returns the message is pullable (no reput thread). Reads
take no lock. Nothing runs in the background: the broker calls ``flush_commit_log`` /
``flush_consume_queues`` on its own timers (config intervals) for ASYNC_FLUSH.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import (
    MAX_PROPERTIES_LENGTH,
    MessageExt,
    Prop,
    SysFlag,
    decode_record,
    encode_properties,
    encode_record,
    record_store_timestamp,
    validate_topic,
)
from ferrymq.common.message_id import offset_msg_id, pack_ip
from ferrymq.store.commit_log import BLANK_SIZE, CommitLog
from ferrymq.store.config import StoreConfig
from ferrymq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from ferrymq.store.dir_lock import StoreDirLock

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # its tagsCode is the delivery time, not a tag hash

MAX_FILTER_SCAN_BYTES = 16000  # ConsumeQueue bytes a filtered pull may scan (at least)
_STORE_TIMESTAMP_SPAN = 48 + 20 + 8  # bytes of a record that always include STORETIMESTAMP


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass
class AppendResult:
    status: PutStatus
    wrote_offset: int = 0  # physical offset of the first record
    wrote_bytes: int = 0
    msg_ids: list[str] = field(default_factory=list)  # offset msgIds, one per message
    queue_offset: int = 0  # of the first message
    msg_num: int = 0
    store_timestamp: int = 0
    remark: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)  # both are stored

    @property
    def msg_id(self) -> str:
        """What SendMessageResponseHeader.msgId carries: comma-joined for a batch."""
        return ",".join(self.msg_ids)


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)  # raw records; b"".join() is a pull body
    suggest_pull_from_slave: bool = False
    first_store_timestamp: int = 0  # of records[0], 0 when none
    fall_behind_bytes: int = 0  # CommitLog max offset - last scanned record (consumer lag in bytes)

    @property
    def message_count(self) -> int:
        return len(self.records)

    @property
    def buffer_total_size(self) -> int:
        return sum(map(len, self.records))

    def body(self) -> bytes:
        return b"".join(self.records)


class StoreNotRunningError(RuntimeError):
    pass


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


class MessageStore:
    def __init__(self, config: StoreConfig, *, store_host: tuple[str, int]) -> None:
        pack_ip(store_host[0])  # offset msgIds embed it: it must be an IP literal
        self.config = config
        self.store_host = store_host
        self.commit_log = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}  # created only under the write lock
        self._delay_ms = config.delay_level_millis()
        self._dir_lock = StoreDirLock(config.store_path_root_dir)
        self._running = False
        # Records within this many bytes of the CommitLog head count as "in memory" (page cache).
        self.in_memory_window = int(_total_physical_memory() * config.access_message_in_memory_max_ratio / 100)

    # ------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Open or create the store and recover it; put and get work when this returns."""
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        clean = self._dir_lock.acquire()
        try:
            self.commit_log.load()
            self._load_consume_queues()
            # A clean exit finished every segment but the last with a blank record; after a
            # crash, check the last three (as RocketMQ does) and their CRCs.
            end = self.commit_log.recover(
                segments_to_check=1 if clean else 3,
                check_crc=not clean and self.config.check_crc_on_recover,
            )
            queues = list(self._queues.values())
            for cq in queues:
                cq.truncate_beyond(end)
            # Records written but not indexed (a crash between the two writes) are indexed now.
            indexed_end = max((cq.max_phys_end for cq in queues), default=0)
            self._replay(max(indexed_end, self.commit_log.min_offset), end)
            for cq in self._queues.values():
                cq.correct_min_offset(self.commit_log.min_offset)
            self.commit_log.queue_offsets = {f"{t}-{q}": cq.max_offset for (t, q), cq in self._queues.items()}
        except BaseException:
            self._close_files()
            self._dir_lock.release(clean=clean)  # an unclean past stays unclean for the next try
            raise
        self._running = True

    def shutdown(self) -> None:
        """Flush and close. Call after the broker stopped calling in."""
        if not self._running:
            return
        self._running = False
        self._close_files()
        self._dir_lock.release()

    def _close_files(self) -> None:
        self.commit_log.close()  # waits for an in-flight put, flushes
        for cq in list(self._queues.values()):
            cq.flush()
            cq.close()

    def _load_consume_queues(self) -> None:
        root = self.config.consume_queue_dir
        os.makedirs(root, exist_ok=True)
        for topic in sorted(os.listdir(root)):
            topic_dir = os.path.join(root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in os.listdir(topic_dir):
                if name.isdigit() and os.path.isdir(os.path.join(topic_dir, name)):
                    self._consume_queue(topic, int(name)).load()

    def _consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Get or create; called under the write lock (or during load) only."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.config.consume_queue_dir, topic, queue_id, self.config.mapped_file_size_consume_queue)
            self._queues[(topic, queue_id)] = cq
        return cq

    def _replay(self, start: int, end: int) -> None:
        for phys, record in self.commit_log.iter_records(start, end):
            m, _ = decode_record(record)
            if SysFlag.is_dispatched(m.sys_flag):
                self._index(m.topic, m.queue_id, m.queue_offset, phys, [m], [m.store_size], m.store_timestamp)

    # ------------------------------------------------------------ writing

    def put_message(self, msg: MessageExt) -> AppendResult:
        """Store one message. Sets its offsets, store time and store host; indexes it before returning."""
        return self._put([msg])

    def put_messages(self, msgs: list[MessageExt]) -> AppendResult:
        """Store a batch contiguously with consecutive queue offsets (same topic and queue)."""
        if not msgs:
            return _refused(PutStatus.MESSAGE_ILLEGAL, "empty batch")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        for m in msgs:
            if m.topic != topic or m.queue_id != queue_id:
                return _refused(PutStatus.MESSAGE_ILLEGAL, "all messages of a batch must have the same topic and queue")
            if SysFlag.transaction_type(m.sys_flag) != SysFlag.TRANSACTION_NOT_TYPE:
                return _refused(PutStatus.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
            if m.delay_level > 0:
                return _refused(PutStatus.MESSAGE_ILLEGAL, "batch messages cannot have a delay level")
        return self._put(msgs)

    def _put(self, msgs: Sequence[MessageExt]) -> AppendResult:
        if not self._running:
            return _refused(PutStatus.SERVICE_NOT_AVAILABLE, "message store is not running")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        if (topic, queue_id) not in self._queues:  # known queues were validated when created
            error = validate_topic(topic)
            if error or queue_id < 0:
                return _refused(PutStatus.MESSAGE_ILLEGAL, error or f"bad queue id {queue_id}")
        records = []
        for m in msgs:
            if len(m.body) > self.config.max_message_size:
                return _refused(
                    PutStatus.MESSAGE_ILLEGAL,
                    f"message body size {len(m.body)} exceeds maxMessageSize {self.config.max_message_size}",
                )
            props = encode_properties(m.properties).encode()
            if len(props) > MAX_PROPERTIES_LENGTH:
                return _refused(
                    PutStatus.PROPERTIES_SIZE_EXCEEDED,
                    f"message properties length {len(props)} exceeds {MAX_PROPERTIES_LENGTH}",
                )
            m.store_host = self.store_host
            try:
                records.append(encode_record(m, props))
            except ValueError as exc:
                return _refused(PutStatus.MESSAGE_ILLEGAL, str(exc))
        data = records[0] if len(records) == 1 else bytearray().join(records)
        if len(data) + BLANK_SIZE > self.commit_log.segment_size:
            return _refused(
                PutStatus.MESSAGE_ILLEGAL,
                f"{len(data)} bytes of records do not fit in a CommitLog file of {self.commit_log.segment_size}",
            )
        sizes = [len(r) for r in records]
        dispatched = SysFlag.is_dispatched(msgs[0].sys_flag)

        def dispatch(queue_offset: int, phys: int, store_ts: int) -> None:
            self._index(topic, queue_id, queue_offset, phys, msgs, sizes, store_ts)

        try:
            appended = self.commit_log.put(data, sizes, f"{topic}-{queue_id}", dispatched, dispatch)
        except (OSError, ValueError) as exc:  # disk full, I/O error; the write was undone
            return _refused(PutStatus.UNKNOWN_ERROR, f"write failed: {exc}")
        if appended is None:
            return _refused(PutStatus.SERVICE_NOT_AVAILABLE, "message store is not running")

        phys, ids = appended.phys_offset, []
        host, port = self.store_host
        for i, (m, size) in enumerate(zip(msgs, sizes)):
            m.commit_log_offset = phys
            m.queue_offset = appended.queue_offset + i if dispatched else 0
            m.store_timestamp = appended.store_timestamp
            ids.append(offset_msg_id(host, port, phys))
            phys += size
        result = AppendResult(
            PutStatus.PUT_OK, appended.phys_offset, len(data), ids, appended.queue_offset, len(msgs),
            appended.store_timestamp,
        )  # fmt: skip
        if self.config.sync_flush and all(m.wait_store_msg_ok for m in msgs):
            self._wait_flushed(phys, result)
        return result

    def _wait_flushed(self, offset: int, result: AppendResult) -> None:
        """SYNC_FLUSH: fsync before answering. Concurrent puts share one fsync (group commit)."""
        started = time.monotonic()
        try:
            self.commit_log.flush(until=offset)
        except OSError as exc:
            result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, f"flush failed: {exc}"
            return
        elapsed_ms = (time.monotonic() - started) * 1000
        if elapsed_ms > self.config.sync_flush_timeout:
            result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, f"flush took {elapsed_ms:.0f} ms"

    def _index(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        phys: int,
        msgs: Sequence[MessageExt],
        sizes: Sequence[int],
        store_ts: int,
    ) -> None:
        """Write the ConsumeQueue entries of records just appended (under the write lock)."""
        entries = []
        for m, size in zip(msgs, sizes):
            entries.append(CQ_ENTRY.pack(phys, size, self._tags_code(topic, m.properties, store_ts)))
            phys += size
        self._consume_queue(topic, queue_id).append(queue_offset, b"".join(entries), phys)

    def _tags_code(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            try:
                level = min(int(props.get(Prop.DELAY, 0)), len(self._delay_ms))
            except ValueError:
                level = 0
            if level > 0:
                return store_ts + self._delay_ms[level - 1]
        tags = props.get(Prop.TAGS)
        return java_string_hash(tags) if tags else 0

    # ------------------------------------------------------------ reading

    def _check_running(self) -> None:
        if not self._running:
            raise StoreNotRunningError("message store is not running")

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
    ) -> GetResult:
        """A pull: statuses and nextBeginOffset as RocketMQ 4.9 (wire facts 7.4).

        ``tag_filter`` gets each entry's raw tagsCode (i64) and says whether it matches.
        ``group`` is accepted for parity with RocketMQ (it only feeds its statistics).
        """
        self._check_running()
        cq = self._queues.get((topic, queue_id))
        if cq is None:  # RocketMQ creates an empty queue on lookup; it reads as NO_MESSAGE_IN_QUEUE
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            # RocketMQ 4.x sends the consumer back to the start when nothing was ever deleted.
            nxt = min_offset if min_offset == 0 else max_offset
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)
        return self._read_queue(cq, offset, max_msg_nums, tag_filter, min_offset, max_offset)

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None,
        min_offset: int,
        max_offset: int,
    ) -> GetResult:
        cl = self.commit_log
        max_phy, cl_min, window = cl.max_offset, cl.min_offset, self.in_memory_window
        scan_entries = max(MAX_FILTER_SCAN_BYTES, max_msg_nums * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE
        data = cq.read_entries(offset, scan_entries)
        if data is None:  # the ConsumeQueue file holding offset is gone
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset)

        status = GetStatus.NO_MATCHED_MESSAGE
        picked: list[tuple[int, int]] = []
        picked_bytes = 0
        skip_below = -1  # after a removed record, skip the rest of its CommitLog file
        last_phys = 0
        scanned = len(data) // CQ_ENTRY_SIZE
        for i, (phys, size, tags_code) in enumerate(CQ_ENTRY.iter_unpack(data)):
            last_phys = phys
            if phys < skip_below:
                continue
            if picked and self._batch_full(len(picked), picked_bytes, size, max_msg_nums, max_phy - phys > window):
                scanned = i
                break
            if tag_filter is not None and not tag_filter(tags_code):
                if not picked:
                    status = GetStatus.NO_MATCHED_MESSAGE
                continue
            if phys < cl_min:
                if not picked:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                skip_below = cl.roll_next_file(phys)
                continue
            picked.append((phys, size))
            picked_bytes += size
            status = GetStatus.FOUND
            skip_below = -1

        records = [r for r in cl.read_many(picked) if r is not None] if picked else []
        if picked and not records:  # deleted between the checks above and the read
            status = GetStatus.MESSAGE_WAS_REMOVING
        fall_behind = max_phy - last_phys
        return GetResult(
            status,
            offset + scanned,
            min_offset,
            max_offset,
            records,
            suggest_pull_from_slave=fall_behind > window,
            first_store_timestamp=record_store_timestamp(records[0]) if records else 0,
            fall_behind_bytes=fall_behind,
        )

    def _batch_full(self, count: int, total: int, size: int, max_msg_nums: int, on_disk: bool) -> bool:
        """RocketMQ's isTheBatchFull; only asked once the batch holds a message (one always goes)."""
        cfg = self.config
        if count >= max_msg_nums:
            return True
        if on_disk:  # not in the page cache: smaller batches
            max_bytes, max_count = cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk
        else:
            max_bytes, max_count = cfg.max_transfer_bytes_on_message_in_memory, cfg.max_transfer_count_on_message_in_memory
        return total + size > max_bytes or count >= max_count

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        """Physical offset of the queue's entry ``offset``, -1 if there is none."""
        entry = self._entry(topic, queue_id, offset)
        return entry[0] if entry else -1

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the queue's message at ``offset``, -1 if there is none."""
        entry = self._entry(topic, queue_id, offset)
        return self._store_time_at(entry[0], entry[1]) if entry else -1

    def _entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        self._check_running()
        cq = self._queues.get((topic, queue_id))
        return cq.entry(offset) if cq else None

    def _store_time_at(self, phys: int, size: int) -> int:
        head = self.commit_log.get_data(phys, min(size, _STORE_TIMESTAMP_SPAN))
        return record_store_timestamp(head) if head and len(head) >= _STORE_TIMESTAMP_SPAN else -1

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The queue offset whose store time equals ``timestamp``, else the nearer of the two
        neighbours (the earlier on a tie). Binary search over the whole queue, clamped to
        [min, max]; an empty or unknown queue answers its min offset (0)."""
        self._check_running()
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset - 1
        cl_min = self.commit_log.min_offset
        left = right = -1
        left_time = right_time = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            entry = cq.entry(mid)
            if entry is None:
                break
            if entry[0] < cl_min:  # record already deleted: search later entries
                lo, left = mid + 1, mid
                continue
            store_time = self._store_time_at(entry[0], entry[1])
            if store_time < 0:
                break
            if store_time == timestamp:
                return mid
            if store_time > timestamp:
                hi, right, right_time = mid - 1, mid, store_time
            else:
                lo, left, left_time = mid + 1, mid, store_time
        if left_time == -1:
            found = right if right >= 0 else left
        elif right_time == -1:
            found = left
        else:
            found = right if abs(timestamp - left_time) > abs(timestamp - right_time) else left
        return min(max(found, cq.min_offset), cq.max_offset)

    def look_message_by_offset(self, phys_offset: int) -> bytes | None:
        """The raw record at ``phys_offset`` (VIEW_MESSAGE_BY_ID, send-back), None if none starts there."""
        self._check_running()
        return self.commit_log.read_record(phys_offset)

    def is_in_memory(self, phys_offset: int) -> bool:
        """Whether the record is near enough the CommitLog head to be in the page cache."""
        return self.commit_log.max_offset - phys_offset <= self.in_memory_window

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def topic_queue_ids(self) -> dict[str, list[int]]:
        """Queues that exist on disk (or were created since load), by topic."""
        out: dict[str, list[int]] = {}
        for topic, queue_id in sorted(list(self._queues)):
            out.setdefault(topic, []).append(queue_id)
        return out

    # ------------------------------------------------------------ flushing

    def flush_commit_log(self) -> int:
        """fsync the CommitLog; returns the durable offset."""
        return self.commit_log.flush()

    def flush_consume_queues(self) -> None:
        for cq in list(self._queues.values()):
            cq.flush()

    def flush(self) -> None:
        self.flush_commit_log()
        self.flush_consume_queues()


def _refused(status: PutStatus, remark: str) -> AppendResult:
    return AppendResult(status, remark=remark)
