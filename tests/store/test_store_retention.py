"""Retention (fileReservedTime, deleteWhen), the minimum offsets that follow it, and the disk guard."""

import os
import time

from small_fs import SmallFsUnavailable, fill_to, small_filesystem
from store_helpers import make_msg

from ferrymq.common.message import decode_records
from ferrymq.store import GetStatus, PutStatus
from tests.support import missing_prerequisite

HOUR_MS = 3_600_000


def local_ms(hour: int, minute: int = 30) -> int:
    """The next hour:minute local time from now, in epoch ms (deleteWhen hours are local, as in RocketMQ)."""
    now = time.localtime()
    for day in range(3):
        ms = int(time.mktime((now.tm_year, now.tm_mon, now.tm_mday + day, hour, minute, 0, 0, 0, -1)) * 1000)
        if ms > time.time() * 1000:
            return ms
    raise AssertionError("unreachable")


def age_files(directory, last_write_ms: int) -> None:
    for name in os.listdir(directory):
        os.utime(directory / name, ns=(last_write_ms * 1_000_000, last_write_ms * 1_000_000))


def fill(store, count, queues=2):
    msgs = [make_msg(queue_id=i % queues, body=b"r" * 900, UNIQ_KEY=f"U{i}") for i in range(count)]
    for m in msgs:
        assert store.put_message(m).status is PutStatus.PUT_OK
    return msgs


def commit_log_files(tmp_path):
    return sorted(os.listdir(tmp_path / "store" / "commitlog"))


def test_expired_files_go_at_the_delete_hour_and_not_before(open_store, tmp_path):
    store = open_store(file_reserved_time=48, delete_when="04;16", max_index_num=50)
    msgs = fill(store, 300)  # 5 CommitLog files
    files = commit_log_files(tmp_path)
    assert len(files) == 5
    at_four = local_ms(4)
    age_files(tmp_path / "store" / "commitlog", at_four - 49 * HOUR_MS)

    assert store.clean(local_ms(5)).commit_log_files == 0  # expired, but 05:xx is not a delete hour
    result = store.clean(at_four)
    assert result.time_up and result.commit_log_files == 4  # never the file being written
    assert commit_log_files(tmp_path) == files[-1:]
    assert store.min_phy_offset == int(files[-1])

    # Queues now start at their first record still in the CommitLog...
    for queue_id in (0, 1):
        first_kept = next(m for m in msgs if m.queue_id == queue_id and m.commit_log_offset >= store.min_phy_offset)
        assert store.get_min_offset_in_queue("TopicTest", queue_id) == first_kept.queue_offset
        # ...and a pull below that is told where to start again (PULL_OFFSET_MOVED with nextBeginOffset).
        below = store.get_messages("g", "TopicTest", queue_id, 0, 32)
        assert (below.status, below.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, first_kept.queue_offset)
        again = store.get_messages("g", "TopicTest", queue_id, below.next_begin_offset, 1)
        assert decode_records(again.body()) == [first_kept]
    # ConsumeQueue files wholly below the CommitLog's start went too (100 entries per file).
    assert os.listdir(tmp_path / "store" / "consumequeue" / "TopicTest" / "0") == ["00000000000000002000"]
    # IndexFiles whose newest record is gone were deleted; the rest still answer.
    assert min(f.header.end_phy_offset for f in store.index.files) >= store.min_phy_offset
    assert store.query_message("TopicTest", "U0", 32, 0, 2**62).records == []
    assert len(store.query_message("TopicTest", "U299", 32, 0, 2**62).records) == 1


def test_young_files_are_kept(open_store, tmp_path):
    store = open_store(file_reserved_time=48, delete_when="04")
    fill(store, 300)
    at_four = local_ms(4)
    age_files(tmp_path / "store" / "commitlog", at_four - 47 * HOUR_MS)
    assert store.clean(at_four).commit_log_files == 0
    assert len(commit_log_files(tmp_path)) == 5


def test_at_most_ten_files_per_run_oldest_first(open_store, tmp_path):
    store = open_store(file_reserved_time=0, delete_when="04")
    fill(store, 900)
    files = commit_log_files(tmp_path)
    assert len(files) == 15
    assert store.clean(local_ms(4)).commit_log_files == 10
    assert commit_log_files(tmp_path) == files[10:]
    assert store.clean(local_ms(4)).commit_log_files == 4
    assert commit_log_files(tmp_path) == files[14:]


def test_disk_above_max_used_ratio_deletes_expired_files_whatever_the_hour(open_store, tmp_path):
    try:
        fs = small_filesystem(tmp_path, 8)
        root, _ = fs.__enter__()
    except SmallFsUnavailable as e:
        missing_prerequisite(str(e))
    try:
        fill_to(root, 0.5)
        store = open_store(root / "store", file_reserved_time=1, delete_when="04", disk_max_used_space_ratio=40,
                           disk_space_clean_forcibly_ratio=100, disk_space_warning_level_ratio=100)
        fill(store, 300)
        at_five = local_ms(5)
        age_files(root / "store" / "commitlog", at_five - HOUR_MS // 2)
        result = store.clean(at_five)
        assert result.space_full and result.disk_ratio > 0.5
        assert result.commit_log_files == 0  # over the ratio, but nothing is an hour old yet
        age_files(root / "store" / "commitlog", at_five - 2 * HOUR_MS)
        assert store.clean(at_five).commit_log_files == 4  # not 04:xx, but the disk needs the space
        store.shutdown()
    finally:
        fs.__exit__(None, None, None)


def test_disk_guard_refuses_sends_and_lets_them_in_again(open_store, tmp_path):
    store = open_store(disk_space_warning_level_ratio=0, clean_file_forcibly_enable=False)
    # Any used space is above a 0 % warning level: the store is full from the start.
    refused = store.put_message(make_msg())
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert refused.remark.startswith("service not available now. It may be caused by one of the following reasons: "
                                     "the broker's disk is full [CL: ")
    assert "diskSpaceWarningLevelRatio 0%" in refused.remark
    assert store.max_phy_offset == 0 and not store.writable

    store.config.disk_space_warning_level_ratio = 100
    store.clean()
    assert store.writable
    assert store.put_message(make_msg()).status is PutStatus.PUT_OK


def test_over_the_forcible_ratio_the_oldest_files_go_even_unexpired(open_store, tmp_path):
    store = open_store(file_reserved_time=72, delete_when="04", disk_space_clean_forcibly_ratio=0,
                       disk_space_warning_level_ratio=100)
    msgs = fill(store, 300)
    assert store.clean(local_ms(5)).commit_log_files == 0  # not a delete hour, disk under diskMaxUsedSpaceRatio
    result = store.clean(local_ms(4))
    assert result.commit_log_files == 4  # RocketMQ's cleanFileForciblyEnable: space before history
    assert store.get_min_offset_in_queue("TopicTest", 0) > 0
    assert store.put_message(make_msg()).status is PutStatus.PUT_OK
    assert msgs  # (the deleted ones were acknowledged: this is why the ratios default to 85 / 90 %)
