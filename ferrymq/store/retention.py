"""Retention and the disk guard (RocketMQ's CleanCommitLogService / CleanConsumeQueueService).

Run every ``cleanResourceInterval`` by the broker, in a thread:

* CommitLog files are deleted, oldest first and never the one being written, when their
  last write is ``fileReservedTime`` hours old and either the hour is in ``deleteWhen``
  or the disk is above ``diskMaxUsedSpaceRatio``. Above ``diskSpaceCleanForciblyRatio``
  (with ``cleanFileForciblyEnable``) the oldest go even unexpired. At most 10 per run.
* Then ConsumeQueue files whose records are all gone, and IndexFiles whose newest record
  is gone, are deleted; each queue's min offset moves to its first readable entry, so a
  pull below it answers PULL_OFFSET_MOVED with the new start.
* Above ``diskSpaceWarningLevelRatio`` the store is marked full and refuses sends until
  usage is back under ``diskSpaceCleanForciblyRatio``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.store.message_store import MessageStore

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10


def disk_used_ratio(path: str) -> float:
    """Used / total of the file system holding ``path`` (Java's getDiskPartitionSpaceUsedPercent); -1 on error."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    return (total - st.f_bfree * st.f_frsize) / total


@dataclass
class CleanResult:
    commit_log_files: int = 0
    consume_queue_files: int = 0
    index_files: int = 0
    disk_ratio: float = 0.0
    time_up: bool = False
    space_full: bool = False


class CleanService:
    def __init__(self, store: "MessageStore") -> None:
        self.store = store
        self._last_physical_min = 0
        self._manual_runs = 0
        self._last_space_warning = -60_000

    def delete_files_manually(self) -> None:
        """As mqadmin deleteExpiredCommitLog: the next runs delete expired files whatever the hour."""
        self._manual_runs = 20

    def run(self, now_ms: int | None = None) -> CleanResult:
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        result = CleanResult()
        self._delete_expired_commit_log(now_ms, result)
        self._delete_expired_logics(result)
        return result

    # ------------------------------------------------------------ CommitLog

    def is_time_to_delete(self, now_ms: int) -> bool:
        return time.localtime(now_ms / 1000).tm_hour in self.store.config.delete_hours()

    def check_space(self) -> tuple[bool, bool, float]:
        """(over diskMaxUsedSpaceRatio, clean immediately, ratio); marks the store full or not."""
        cfg = self.store.config
        ratio = disk_used_ratio(cfg.store_path_root_dir)
        warning = cfg.disk_space_warning_level_ratio / 100
        forcibly = cfg.disk_space_clean_forcibly_ratio / 100
        clean_now = False
        if ratio > warning:
            self.store.mark_disk_full(f"disk usage {ratio:.2%} is above diskSpaceWarningLevelRatio {cfg.disk_space_warning_level_ratio}%")
            clean_now = True
        elif ratio > forcibly:
            clean_now = True
        else:
            self.store.mark_disk_ok(ratio)
        return ratio < 0 or ratio > cfg.disk_max_used_ratio, clean_now, ratio

    def _delete_expired_commit_log(self, now_ms: int, result: CleanResult) -> None:
        cfg = self.store.config
        result.time_up = self.is_time_to_delete(now_ms)
        result.space_full, clean_now, result.disk_ratio = self.check_space()
        manual = self._manual_runs > 0
        if not (result.time_up or result.space_full or manual):
            return
        if manual:
            self._manual_runs -= 1
        at_once = cfg.clean_file_forcibly_enable and clean_now
        result.commit_log_files = self.store.commit_log.delete_expired(
            cfg.file_reserved_time * 3_600_000, now_ms, at_once=at_once, max_files=DELETE_FILES_BATCH_MAX)
        if result.commit_log_files:
            log.info("retention: deleted %d CommitLog file(s) (reserved %d h, time up %s, disk %.2f%%%s); "
                     "CommitLog now starts at %d", result.commit_log_files, cfg.file_reserved_time, result.time_up,
                     result.disk_ratio * 100, ", forcibly" if at_once else "", self.store.commit_log.min_offset)
        elif result.space_full and now_ms - self._last_space_warning >= 60_000:
            self._last_space_warning = now_ms  # once a minute is enough to be noticed
            log.warning("disk usage %.2f%% is above diskMaxUsedSpaceRatio %d%% but no CommitLog file could be deleted "
                        "(none is older than fileReservedTime %d h)", result.disk_ratio * 100,
                        cfg.disk_max_used_space_ratio, cfg.file_reserved_time)

    # ------------------------------------------------------------ ConsumeQueues and IndexFiles

    def _delete_expired_logics(self, result: CleanResult) -> None:
        min_offset = self.store.commit_log.min_offset
        if min_offset <= self._last_physical_min:
            return
        self._last_physical_min = min_offset
        for cq in self.store.consume_queues():
            result.consume_queue_files += cq.delete_expired(min_offset)
        if self.store.index is not None:
            result.index_files = self.store.index.delete_expired(min_offset)
        if result.consume_queue_files or result.index_files:
            log.info("retention: deleted %d ConsumeQueue and %d index file(s) below CommitLog offset %d",
                     result.consume_queue_files, result.index_files, min_offset)
