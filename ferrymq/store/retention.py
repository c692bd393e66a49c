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
* With timers (docs/timers.md#retention): TimerLog segments whose timers all fired are deleted,
  and no CommitLog file holding the record of a timer not yet fired is, save when the disk is
  past ``diskSpaceCleanForciblyRatio``: then the timers lost are counted and logged.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.store.commit_log import CommitLog
    from ferrymq.store.config import StoreConfig
    from ferrymq.store.dispatch import ConsumeQueueTable
    from ferrymq.store.index_service import IndexService
    from ferrymq.store.timer_store import TimerStore

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
    timer_log_files: int = 0  # TimerLog segments whose timers all fired
    timer_floor: int | None = None  # CommitLog offset of the oldest timer not fired: kept, and all after it
    timers_lost: int = 0  # timers not fired whose record a forced deletion (disk full) took


class DiskGuard:
    """Whether the disk lets the store take writes. Marked full above
    diskSpaceWarningLevelRatio (seen by a retention run or when a new CommitLog file starts)
    or when a write fails for lack of space; cleared by a retention run that finds usage
    back under diskSpaceCleanForciblyRatio."""

    def __init__(self, config: "StoreConfig") -> None:
        self.config = config
        self.full_reason: str | None = None  # why sends are refused; None while writable

    def mark_full(self, reason: str) -> None:
        if self.full_reason is None:
            log.error("message store marked full, sends are refused until space is freed: %s", reason)
        self.full_reason = reason

    def mark_ok(self, ratio: float) -> None:
        if self.full_reason is not None:
            log.warning("disk usage %.2f%% is acceptable again: accepting sends", ratio * 100)
        self.full_reason = None

    def check_on_roll(self) -> None:
        """A new CommitLog file is a cheap moment to look at the disk between retention runs."""
        cfg = self.config
        ratio = disk_used_ratio(cfg.store_path_root_dir)
        if ratio > cfg.disk_space_warning_level_ratio / 100:
            self.mark_full(f"disk usage {ratio:.2%} is above diskSpaceWarningLevelRatio "
                           f"{cfg.disk_space_warning_level_ratio}%")

    def unavailable_remark(self, reason: str) -> str:
        """RocketMQ's remark for SERVICE_NOT_AVAILABLE (with its disk usage figures), and why."""
        cfg = self.config
        root = cfg.store_path_root_dir
        cl = disk_used_ratio(cfg.commit_log_dir if os.path.isdir(cfg.commit_log_dir) else root)
        cq = disk_used_ratio(cfg.consume_queue_dir if os.path.isdir(cfg.consume_queue_dir) else root)
        ix = disk_used_ratio(cfg.index_dir if os.path.isdir(cfg.index_dir) else root)
        return ("service not available now. It may be caused by one of the following reasons: the broker's disk is full "
                f"[CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {ix:5.2f}], messages are put to the slave, message store has been "
                f"shut down, etc. ({reason})")


class CleanService:
    def __init__(self, config: "StoreConfig", commit_log: "CommitLog", queues: "ConsumeQueueTable",
                 index: "IndexService | None", guard: DiskGuard, timers: "TimerStore | None" = None) -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.guard = guard
        self.timers = timers
        self._last_physical_min = 0
        self._last_space_warning = -60_000

    def run(self, now_ms: int | None = None) -> CleanResult:
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        result = CleanResult()
        if self.timers is not None:
            result.timer_log_files = self.timers.delete_fired()
            if result.timer_log_files:
                log.info("retention: deleted %d TimerLog file(s) whose timers all fired", result.timer_log_files)
            result.timer_floor = self.timers.oldest_unfired_phys()
        self._delete_expired_commit_log(now_ms, result)
        self._delete_expired_logics(result)
        return result

    # ------------------------------------------------------------ CommitLog

    def is_time_to_delete(self, now_ms: int) -> bool:
        return time.localtime(now_ms / 1000).tm_hour in self.config.delete_hours()

    def check_space(self) -> tuple[bool, bool, float]:
        """(over diskMaxUsedSpaceRatio, clean immediately, ratio); marks the store full or not."""
        cfg = self.config
        ratio = disk_used_ratio(cfg.store_path_root_dir)
        warning = cfg.disk_space_warning_level_ratio / 100
        forcibly = cfg.disk_space_clean_forcibly_ratio / 100
        clean_now = False
        if ratio > warning:
            self.guard.mark_full(f"disk usage {ratio:.2%} is above diskSpaceWarningLevelRatio {cfg.disk_space_warning_level_ratio}%")
            clean_now = True
        elif ratio > forcibly:
            clean_now = True
        else:
            self.guard.mark_ok(ratio)
        return ratio < 0 or ratio > cfg.disk_max_used_ratio, clean_now, ratio

    def _delete_expired_commit_log(self, now_ms: int, result: CleanResult) -> None:
        cfg = self.config
        result.time_up = self.is_time_to_delete(now_ms)
        result.space_full, clean_now, result.disk_ratio = self.check_space()
        if not (result.time_up or result.space_full):
            return
        at_once = cfg.clean_file_forcibly_enable and clean_now
        result.commit_log_files = self.commit_log.delete_expired(
            cfg.file_reserved_time * 3_600_000, now_ms, at_once=at_once, max_files=DELETE_FILES_BATCH_MAX,
            keep_from=None if at_once else result.timer_floor)
        if result.commit_log_files and result.timer_floor is not None and self.commit_log.min_offset > result.timer_floor:
            result.timers_lost = self.timers.unfired_below(self.commit_log.min_offset)
            log.error("retention: disk usage %.2f%% is above diskSpaceCleanForciblyRatio %d%%: CommitLog files "
                      "deleted by force up to offset %d held %d timer(s) not yet fired (from offset %d); they will "
                      "not be delivered", result.disk_ratio * 100, cfg.disk_space_clean_forcibly_ratio,
                      self.commit_log.min_offset, result.timers_lost, result.timer_floor)
        if result.commit_log_files:
            log.info("retention: deleted %d CommitLog file(s) (reserved %d h, time up %s, disk %.2f%%%s); "
                     "CommitLog now starts at %d", result.commit_log_files, cfg.file_reserved_time, result.time_up,
                     result.disk_ratio * 100, ", forcibly" if at_once else "", self.commit_log.min_offset)
        elif result.space_full and now_ms - self._last_space_warning >= 60_000:
            self._last_space_warning = now_ms  # once a minute is enough to be noticed
            log.warning("disk usage %.2f%% is above diskMaxUsedSpaceRatio %d%% but no CommitLog file could be deleted "
                        "(none is older than fileReservedTime %d h%s)", result.disk_ratio * 100,
                        cfg.disk_max_used_space_ratio, cfg.file_reserved_time,
                        "" if result.timer_floor is None else
                        f", or before the oldest timer not yet fired at offset {result.timer_floor}")

    # ------------------------------------------------------------ ConsumeQueues and IndexFiles

    def _delete_expired_logics(self, result: CleanResult) -> None:
        min_offset = self.commit_log.min_offset
        if min_offset <= self._last_physical_min:
            return
        self._last_physical_min = min_offset
        for cq in self.queues:
            result.consume_queue_files += cq.delete_expired(min_offset)
        if self.index is not None:
            result.index_files = self.index.delete_expired(min_offset)
        if result.consume_queue_files or result.index_files:
            log.info("retention: deleted %d ConsumeQueue and %d index file(s) below CommitLog offset %d",
                     result.consume_queue_files, result.index_files, min_offset)
