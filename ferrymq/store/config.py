"""Store settings; names and defaults follow RocketMQ's MessageStoreConfig (wire facts 7.8)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ferrymq.store.consume_queue import CQ_ENTRY_SIZE

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass
class StoreConfig:
    store_path_root_dir: str
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_ENTRY_SIZE
    max_message_size: int = 4 * 1024 * 1024  # compared to the BODY length (4.9.4+ semantics)
    flush_disk_type: str = ASYNC_FLUSH  # SYNC_FLUSH: put returns after fsync (when WAIT is true)
    sync_flush_timeout: int = 5000  # a slower fsync answers FLUSH_DISK_TIMEOUT (still stored)
    flush_interval_commit_log: int = 500  # for the broker's flush timer; the store runs no threads
    flush_interval_consume_queue: int = 1000
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40  # % of RAM behind the CommitLog head counted "in memory"
    check_crc_on_recover: bool = True  # only after an unclean exit: a CRC per record is slow in Python
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

    def __post_init__(self) -> None:
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(f"flush_disk_type must be {ASYNC_FLUSH} or {SYNC_FLUSH}, got {self.flush_disk_type!r}")
        # Java rounds the ConsumeQueue file size up to whole entries.
        entries = -(-self.mapped_file_size_consume_queue // CQ_ENTRY_SIZE)
        self.mapped_file_size_consume_queue = max(1, entries) * CQ_ENTRY_SIZE
        self.delay_level_millis()  # fail at construction on a malformed table

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    def delay_level_millis(self) -> list[int]:
        """message_delay_level as milliseconds; level n is element n-1."""
        out = []
        for item in self.message_delay_level.split():
            unit = _DELAY_UNITS_MS.get(item[-1:])
            if unit is None or not item[:-1].isdigit():
                raise ValueError(f"bad delay level {item!r} in {self.message_delay_level!r}")
            out.append(int(item[:-1]) * unit)
        return out
