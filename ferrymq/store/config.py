"""Store settings; names and defaults follow RocketMQ's MessageStoreConfig (docs/wire-format.md#store-settings)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ferrymq.common.config_loader import LIVE, check_range
from ferrymq.store.consume_queue import CQ_ENTRY_SIZE

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass
class StoreConfig:
    """Fields marked ``LIVE`` may change on a running broker (UPDATE_BROKER_CONFIG); the
    rest shape files and threads made at start and need a restart."""

    store_path_root_dir: str
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_ENTRY_SIZE
    # compared to the BODY length (4.9.4+ semantics)
    max_message_size: int = field(default=4 * 1024 * 1024, metadata=LIVE)
    # ---- flushing (docs/wire-format.md#store-settings)
    flush_disk_type: str = ASYNC_FLUSH  # SYNC_FLUSH: a send is answered after its fsync (group commit)
    # ms; a slower fsync answers FLUSH_DISK_TIMEOUT (the message is stored)
    sync_flush_timeout: int = field(default=5000, metadata=LIVE)
    flush_interval_commit_log: int = 500  # ms between ASYNC_FLUSH CommitLog flushes
    flush_commit_log_least_pages: int = 4  # ...each only when this many 4 KiB pages are dirty,
    flush_commit_log_thorough_interval: int = 10_000  # ...except one flush of everything this often (ms)
    flush_interval_consume_queue: int = 1000  # ms; ConsumeQueues, IndexFiles and the checkpoint
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms; the checkpoint's logics/index times move then
    # ---- reading
    max_transfer_bytes_on_message_in_memory: int = field(default=256 * 1024, metadata=LIVE)
    max_transfer_count_on_message_in_memory: int = field(default=32, metadata=LIVE)
    max_transfer_bytes_on_message_in_disk: int = field(default=64 * 1024, metadata=LIVE)
    max_transfer_count_on_message_in_disk: int = field(default=8, metadata=LIVE)
    access_message_in_memory_max_ratio: int = 40  # % of RAM behind the CommitLog head counted "in memory"
    # ---- recovery
    check_crc_on_recover: bool = True  # only after an unclean exit: a CRC per record is slow in Python
    # ---- message index (IndexFile, docs/wire-format.md#indexfile) and queries
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    # QUERY_MESSAGE by UNIQ_KEY returns at most this many
    default_query_max_num: int = field(default=32, metadata=LIVE)
    max_msgs_num_batch: int = 64  # any QUERY_MESSAGE returns at most this many
    # ---- retention and the disk guard
    # hours a finished CommitLog file is kept after its last write
    file_reserved_time: int = field(default=72, metadata=LIVE)
    # hours of the day (";"-separated) when expired files are deleted
    delete_when: str = field(default="04", metadata=LIVE)
    # % used above which expired files are deleted at once (clamped 10..95)
    disk_max_used_space_ratio: int = field(default=75, metadata=LIVE)
    # % used above which the oldest files go even unexpired
    disk_space_clean_forcibly_ratio: int = field(default=85, metadata=LIVE)
    # % used above which sends are refused (disk full)
    disk_space_warning_level_ratio: int = field(default=90, metadata=LIVE)
    clean_file_forcibly_enable: bool = field(default=True, metadata=LIVE)
    clean_resource_interval: int = 10_000  # ms between retention checks
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # ---- RocketMQ 5 timer messages (docs/timers.md)
    timer_wheel_enable: bool = True  # false: sends asking for a timer are refused, as Apache does
    timer_precision_ms: int = 1000  # one wheel slot per this many ms
    timer_max_delay_sec: int = 259_200  # 3 days; a later delivery time is refused
    mapped_file_size_timer_log: int = 48 * 1024 * 1024  # whole 48-byte records
    # slots (of timerPrecisionMs): a timer due further ahead of its record's store time is filed
    # at the window's end and stored again there (docs/timers.md#retention); 2 days, as Apache's
    timer_roll_window_slot: int = 172_800

    def __post_init__(self) -> None:
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(f"flushDiskType must be {ASYNC_FLUSH} or {SYNC_FLUSH}, got {self.flush_disk_type!r}")
        check_range(self, "mapped_file_size_commit_log", 4096)
        check_range(self, "mapped_file_size_consume_queue", CQ_ENTRY_SIZE)
        check_range(self, "max_message_size", 1)
        for name in ("flush_interval_commit_log", "flush_interval_consume_queue", "clean_resource_interval",
                     "max_transfer_bytes_on_message_in_memory", "max_transfer_count_on_message_in_memory",
                     "max_transfer_bytes_on_message_in_disk", "max_transfer_count_on_message_in_disk",
                     "default_query_max_num", "max_msgs_num_batch"):
            check_range(self, name, 1)
        for name in ("sync_flush_timeout", "flush_commit_log_least_pages", "flush_commit_log_thorough_interval",
                     "flush_consume_queue_least_pages", "flush_consume_queue_thorough_interval", "file_reserved_time"):
            check_range(self, name, 0)
        for name in ("access_message_in_memory_max_ratio", "disk_max_used_space_ratio",
                     "disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"):
            check_range(self, name, 0, 100)
        # Java rounds the ConsumeQueue file size up to whole entries.
        entries = -(-self.mapped_file_size_consume_queue // CQ_ENTRY_SIZE)
        self.mapped_file_size_consume_queue = max(1, entries) * CQ_ENTRY_SIZE
        self.delay_level_millis()  # fail at construction on a malformed table
        check_range(self, "timer_precision_ms", 1, 60_000)
        check_range(self, "timer_max_delay_sec", 1)
        if (2 * self.timer_max_delay_sec * 1000) % self.timer_precision_ms:
            raise ValueError("timerMaxDelaySec * 2000 must be a multiple of timerPrecisionMs (the wheel's slots)")
        check_range(self, "mapped_file_size_timer_log", 48)
        check_range(self, "timer_roll_window_slot", 2)
        self.mapped_file_size_timer_log -= self.mapped_file_size_timer_log % 48
        self.delete_hours()
        if self.max_hash_slot_num < 1 or self.max_index_num < 2:
            raise ValueError("maxHashSlotNum must be >= 1 and maxIndexNum >= 2")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def timer_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "timer")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def disk_max_used_ratio(self) -> float:
        """diskMaxUsedSpaceRatio as a fraction, clamped to 10..95 % as RocketMQ does."""
        return min(max(self.disk_max_used_space_ratio, 10), 95) / 100

    def delete_hours(self) -> set[int]:
        """delete_when as hours of the day: "04" -> {4}, "01;13" -> {1, 13}."""
        hours = set()
        for item in self.delete_when.split(";"):
            item = item.strip()
            if not item:
                continue
            if not item.isdigit() or not 0 <= int(item) <= 23:
                raise ValueError(f"deleteWhen must be hours 00..23 separated by ';', got {self.delete_when!r}")
            hours.add(int(item))
        return hours

    def delay_level_millis(self) -> list[int]:
        """message_delay_level as milliseconds; level n is element n-1."""
        out = []
        for item in self.message_delay_level.split():
            unit = _DELAY_UNITS_MS.get(item[-1:])
            if unit is None or not item[:-1].isdigit():
                raise ValueError(f"bad delay level {item!r} in {self.message_delay_level!r}")
            out.append(int(item[:-1]) * unit)
        return out
