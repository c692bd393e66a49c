"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore).

Synchronous and thread-safe: the broker calls it from worker threads. A put encodes
outside the write lock, then appends to the CommitLog and writes its ConsumeQueue entry
and IndexFile keys under it, so by the time put returns the message is pullable and
queryable (no reput thread). Reads take no lock.

Durability: with SYNC_FLUSH the store runs one group-commit thread (store/flush.py); a
put either waits for it (``wait_flush=True``, the default for direct callers) or leaves
the waiting to its caller (the broker's AsyncMessageStore waits on the event loop). With
ASYNC_FLUSH the broker calls ``flush_commit_log_timed`` / ``flush_consume_queues_timed``
on its timers, and ``clean`` for retention (store/retention.py).

Recovery (store/recovery.py) follows RocketMQ (wire facts 6.4, 6.5): after a clean exit the last CommitLog
file is walked; after an unclean one (``abort`` present) every file from the checkpoint
on is validated record by record (magic, length, body CRC), a torn or corrupt tail is cut
off and logged, and ConsumeQueues and IndexFiles are trimmed to the CommitLog and rebuilt
from it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
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
    encode_properties,
    encode_record,
    record_store_timestamp,
    validate_topic,
)
from ferrymq.common.message_id import offset_msg_id, pack_ip
from ferrymq.store.checkpoint import StoreCheckpoint
from ferrymq.store.commit_log import BLANK_SIZE, CommitLog, RecoveryReport
from ferrymq.store.config import StoreConfig
from ferrymq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from ferrymq.store.dir_lock import StoreDirLock
from ferrymq.store.flush import GroupCommitService
from ferrymq.store.index_service import IndexService
from ferrymq.store.recovery import StoreRecovery
from ferrymq.store.retention import CleanResult, CleanService, disk_used_ratio

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # its tagsCode is the delivery time, not a tag hash

MAX_FILTER_SCAN_BYTES = 16000  # ConsumeQueue bytes a filtered pull may scan (at least)
_STORE_TIMESTAMP_SPAN = 48 + 20 + 8  # bytes of a record that always include STORETIMESTAMP
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


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


@dataclass
class QueryMessageResult:
    """QUERY_MESSAGE: candidate records (hash matches; the client checks the keys)."""

    records: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


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
        self.checkpoint: StoreCheckpoint | None = None
        self.index = IndexService(config) if config.message_index_enable else None
        self.group_commit: GroupCommitService | None = None
        self.clean_service = CleanService(self)
        self.commit_log.on_roll = self._check_disk_on_roll
        self.last_recovery: RecoveryReport | None = None
        self.last_exit_clean = True
        self._disk_full: str | None = None  # why sends are refused, None while writable
        self._last_dispatched_ts = 0  # store time of the newest ConsumeQueue entry (checkpoint)
        self._last_cl_thorough: float | None = None  # monotonic ms of the last full flush; None: never
        self._last_cq_thorough: float | None = None
        self._timed_flush_lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Open or create the store and recover it; put and get work when this returns."""
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        clean = self._dir_lock.acquire()
        self.last_exit_clean = clean
        try:
            self.checkpoint = StoreCheckpoint(self.config.checkpoint_path)
            self.commit_log.load()
            self._load_consume_queues()
            if self.index is not None:
                self.index.load()
            StoreRecovery(self).run(clean)
        except BaseException:
            self._close_files()
            self._dir_lock.release(clean=clean)  # an unclean past stays unclean for the next try
            raise
        self._running = True
        if self.config.sync_flush:
            self.group_commit = GroupCommitService(self._group_flush, lambda: self.commit_log.flushed_offset)
            self.group_commit.start()
        self.clean_service.check_space()  # refuse sends from the start if the disk is already over the guard

    def shutdown(self) -> None:
        """Flush and close. Call after the broker stopped calling in."""
        if not self._running:
            return
        self._running = False
        if self.group_commit is not None:
            self.group_commit.stop()
            stats = self.group_commit.stats
            log.info("group commit: %d acknowledgement(s) over %d fsync(s) (%.1f per fsync, largest group %d)",
                     stats.acks, stats.fsyncs, stats.acks_per_fsync, stats.largest_group)
        self._close_files()
        self._dir_lock.release()

    def _close_files(self) -> None:
        self.commit_log.close()  # waits for an in-flight put, flushes
        for cq in list(self._queues.values()):
            cq.flush()
            cq.close()
        if self.index is not None:
            self.index.close()
        if self.checkpoint is not None:
            head_offset, head_ts = self.commit_log.flushed_offset, self._last_dispatched_ts
            self.checkpoint.commit_log_flushed(head_offset, head_ts)
            self.checkpoint.logics_flushed(head_ts, self.index.last_indexed_timestamp if self.index else head_ts)
            self.checkpoint.close()

    # ------------------------------------------------------------ recovery (store/recovery.py)

    def _store_time_of(self, phys: int) -> int:
        head = self.commit_log.get_data(phys, _STORE_TIMESTAMP_SPAN)
        return record_store_timestamp(head) if head and len(head) >= _STORE_TIMESTAMP_SPAN else 0

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

    # ------------------------------------------------------------ writing

    def put_message(self, msg: MessageExt, *, wait_flush: bool = True) -> AppendResult:
        """Store one message. Sets its offsets, store time and store host; indexes it before returning.

        With SYNC_FLUSH and ``wait_flush`` (and the message's WAIT not false) it returns once
        the record is fsynced; without ``wait_flush`` the caller waits (``request_flush``)."""
        return self._put([msg], wait_flush)

    def put_messages(self, msgs: list[MessageExt], *, wait_flush: bool = True) -> AppendResult:
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
        return self._put(msgs, wait_flush)

    def _put(self, msgs: Sequence[MessageExt], wait_flush: bool = True) -> AppendResult:
        if not self._running:
            return _refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark("message store is not running"))
        if self._disk_full is not None:
            return _refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark(self._disk_full))
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
            if dispatched:
                self._index(topic, queue_id, queue_offset, phys, msgs, sizes, store_ts)
            if self.index is not None:
                try:
                    at = phys
                    for m, size in zip(msgs, sizes):
                        self.index.build_index(topic, m.sys_flag, m.properties, at, store_ts)
                        at += size
                except BaseException:
                    if dispatched:
                        self._queues[(topic, queue_id)].truncate_to(queue_offset)
                    raise
            self._last_dispatched_ts = store_ts

        try:
            appended = self.commit_log.put(data, sizes, f"{topic}-{queue_id}", dispatched, dispatch)
        except OSError as exc:  # the write and its index entries were undone: nothing was stored
            if exc.errno in _DISK_FULL_ERRNOS:
                self.mark_disk_full(f"write failed: {exc}")
                return _refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark(f"write failed: {exc}"))
            log.error("CommitLog write failed: %s", exc)
            return _refused(PutStatus.UNKNOWN_ERROR, f"write failed: {exc}")
        except ValueError as exc:
            return _refused(PutStatus.UNKNOWN_ERROR, f"write failed: {exc}")
        if appended is None:
            return _refused(PutStatus.SERVICE_NOT_AVAILABLE, self.service_unavailable_remark("message store is not running"))

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
        if self.config.sync_flush and wait_flush:
            if all(m.wait_store_msg_ok for m in msgs):
                self._wait_flushed(phys, result)
            else:
                self.request_flush(phys, None)
        return result

    def request_flush(self, offset: int, done: Callable[[bool], None] | None) -> None:
        """SYNC_FLUSH: call ``done(ok)`` once the CommitLog is fsynced up to ``offset``; with
        ``done`` None just have it flushed soon (WAIT=false). Concurrent requests share fsyncs."""
        gc = self.group_commit
        if gc is None:
            if done is not None:
                done(self.commit_log.flushed_offset >= offset)
        elif done is None:
            gc.wakeup()
        else:
            gc.request(offset, done)

    def _wait_flushed(self, offset: int, result: AppendResult) -> None:
        """Block until the group-commit thread's fsync covers ``offset`` or syncFlushTimeout passes."""
        if self.config.sync_flush_timeout <= 0 and self.commit_log.flushed_offset < offset:
            self.request_flush(offset, None)  # no time to wait at all: just have it flushed soon
            result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, (
                f"wait for flush timeout: not fsynced within syncFlushTimeout {self.config.sync_flush_timeout} ms")
            return
        flushed = threading.Event()
        outcome = [False]

        def done(ok: bool) -> None:
            outcome[0] = ok
            flushed.set()

        self.request_flush(offset, done)
        if not flushed.wait(max(0, self.config.sync_flush_timeout) / 1000):
            result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, (
                f"wait for flush timeout: not fsynced within syncFlushTimeout {self.config.sync_flush_timeout} ms")
        elif not outcome[0]:
            result.status, result.remark = PutStatus.FLUSH_DISK_TIMEOUT, "the fsync of the CommitLog failed"

    def _group_flush(self) -> int:
        """The group-commit thread's fsync; the checkpoint follows it."""
        offset, store_ts = self.commit_log.flush()
        if self.checkpoint is not None:
            self.checkpoint.commit_log_flushed(offset, store_ts)
        return offset

    # ------------------------------------------------------------ disk guard

    def mark_disk_full(self, reason: str) -> None:
        if self._disk_full is None:
            log.error("message store marked full, sends are refused until space is freed: %s", reason)
        self._disk_full = reason

    def mark_disk_ok(self, ratio: float) -> None:
        if self._disk_full is not None:
            log.warning("disk usage %.2f%% is acceptable again: accepting sends", ratio * 100)
        self._disk_full = None

    @property
    def writable(self) -> bool:
        return self._running and self._disk_full is None

    def _check_disk_on_roll(self) -> None:
        """A new CommitLog file is a cheap moment to look at the disk between retention runs."""
        ratio = disk_used_ratio(self.config.store_path_root_dir)
        if ratio > self.config.disk_space_warning_level_ratio / 100:
            self.mark_disk_full(f"disk usage {ratio:.2%} is above diskSpaceWarningLevelRatio "
                                f"{self.config.disk_space_warning_level_ratio}%")

    def service_unavailable_remark(self, reason: str) -> str:
        """RocketMQ's remark for SERVICE_NOT_AVAILABLE (with its disk usage figures), and why."""
        root = self.config.store_path_root_dir
        cl = disk_used_ratio(self.config.commit_log_dir if os.path.isdir(self.config.commit_log_dir) else root)
        cq = disk_used_ratio(self.config.consume_queue_dir if os.path.isdir(self.config.consume_queue_dir) else root)
        ix = disk_used_ratio(self.config.index_dir if os.path.isdir(self.config.index_dir) else root)
        return ("service not available now. It may be caused by one of the following reasons: the broker's disk is full "
                f"[CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {ix:5.2f}], messages are put to the slave, message store has been "
                f"shut down, etc. ({reason})")

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

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """QUERY_MESSAGE: records indexed under ``topic#key`` stored within [begin, end] ms,
        at most min(max_num, maxMsgsNumBatch), oldest first (RocketMQ's queryMessage)."""
        self._check_running()
        result = QueryMessageResult()
        if self.index is None:
            return result
        last_query_time = end
        for _ in range(3):
            found = self.index.query_offsets(topic, key, max_num, begin, last_query_time)
            if not found.phy_offsets:
                break
            result.index_last_update_timestamp = found.index_last_update_timestamp
            result.index_last_update_phyoffset = found.index_last_update_phyoffset
            for i, phys in enumerate(sorted(set(found.phy_offsets))):
                record = self.commit_log.read_record(phys)
                if record is None:  # deleted by retention (or never written: a refused put)
                    continue
                if i == 0:
                    last_query_time = record_store_timestamp(record)
                result.records.append(record)
            if result.records or last_query_time < begin:
                break
        return result

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

    def consume_queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    # ------------------------------------------------------------ flushing and retention

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """fsync the CommitLog (if ``least_pages`` pages are dirty); returns the durable offset."""
        flushed = self.commit_log.flush(least_pages)
        if flushed is not None and self.checkpoint is not None:
            self.checkpoint.commit_log_flushed(*flushed)
        return self.commit_log.flushed_offset

    def flush_commit_log_timed(self) -> int:
        """ASYNC_FLUSH's timer (RocketMQ's FlushRealTimeService): flush when at least
        flushCommitLogLeastPages pages are dirty, and everything every
        flushCommitLogThoroughInterval. Returns the durable offset."""
        with self._timed_flush_lock:
            now = time.monotonic() * 1000
            least = self.config.flush_commit_log_least_pages
            if self._last_cl_thorough is None or now - self._last_cl_thorough >= self.config.flush_commit_log_thorough_interval:
                self._last_cl_thorough, least = now, 0
        return self.flush_commit_log(least)

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """fsync ConsumeQueues (and, for a full flush, IndexFiles) and move the checkpoint."""
        logics_ts = self._last_dispatched_ts  # read first: the flushes below cover at least this
        index_ts = self.index.last_indexed_timestamp if self.index is not None else 0
        for cq in list(self._queues.values()):
            cq.flush(least_pages)
        if self.index is not None:
            self.index.flush(durable=least_pages == 0)
        if least_pages == 0 and self.checkpoint is not None:
            self.checkpoint.logics_flushed(logics_ts, index_ts or logics_ts)

    def flush_consume_queues_timed(self) -> None:
        """The ConsumeQueue timer (RocketMQ's FlushConsumeQueueService): flushConsumeQueueLeastPages,
        and a full flush (IndexFiles and checkpoint too) every flushConsumeQueueThoroughInterval."""
        with self._timed_flush_lock:
            now = time.monotonic() * 1000
            least = self.config.flush_consume_queue_least_pages
            if self._last_cq_thorough is None or now - self._last_cq_thorough >= self.config.flush_consume_queue_thorough_interval:
                self._last_cq_thorough, least = now, 0
        self.flush_consume_queues(least)

    def flush(self) -> None:
        self.flush_commit_log()
        self.flush_consume_queues()

    def clean(self, now_ms: int | None = None) -> CleanResult:
        """One retention run (expired files, disk guard); the broker calls it every cleanResourceInterval."""
        self._check_running()
        return self.clean_service.run(now_ms)


def _refused(status: PutStatus, remark: str) -> AppendResult:
    return AppendResult(status, remark=remark)
