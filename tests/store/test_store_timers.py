"""The store's dispatch feeds the timing store from the timer topic's records (docs/timers.md):
on put, after a kill -9 (re-dispatch from the CommitLog), and on a CommitLog truncation."""

from __future__ import annotations

import os
import shutil
import time

from store_helpers import make_msg

from ferrymq.common.message import Prop, decode_record
from ferrymq.common.protocol import TIMER_TOPIC


def timer_msg(due_ms: int, real_topic: str = "TopicTest", real_qid: int = 1):
    return make_msg(TIMER_TOPIC, 0, **{Prop.TIMER_OUT_MS: str(due_ms), Prop.REAL_TOPIC: real_topic,
                                       Prop.REAL_QID: str(real_qid)})


def due_offsets(store, now_ms: int) -> list[int]:
    out = []
    while (taken := store.timers.take(now_ms)) is not None:
        out += [r.phys for r in taken.records]
    return sorted(out)


def put_timers(store, count: int, due_ms: int) -> list[int]:
    offsets = []
    for i in range(count):
        store.put_message(make_msg(body=b"ordinary"))  # timers among ordinary records
        offsets.append(store.put_message(timer_msg(due_ms + (i % 3) * 1000)).wrote_offset)
    return offsets


def test_a_put_under_the_timer_topic_is_indexed_by_its_due_time(open_store):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    offsets = put_timers(store, 10, due)
    assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 10  # a queue like any other, too
    assert store.timers.take(due - 1) is None
    assert due_offsets(store, due + 5000) == offsets


def test_timers_survive_a_restart(open_store, tmp_path):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    offsets = put_timers(store, 10, due)
    store.shutdown()
    assert due_offsets(open_store(), due + 5000) == offsets


def test_after_a_kill_9_a_lost_timer_index_is_dispatched_again(open_store, tmp_path):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    offsets = put_timers(store, 30, due)
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed)  # as kill -9 leaves it: no clean shutdown
    log_dir = crashed / "timer" / "log"
    for name in os.listdir(log_dir):  # and the timer index lost its unsynced tail (a power cut)
        os.truncate(log_dir / name, 48 * 7 + 20)
    assert due_offsets(open_store(crashed), due + 5000) == offsets


def test_a_commit_log_truncation_forgets_the_timers_past_it(open_store):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    offsets = put_timers(store, 10, due)
    store.truncate(offsets[6])
    assert due_offsets(store, due + 5000) == offsets[:6]


def test_no_timing_store_when_the_wheel_is_off(open_store, tmp_path):
    store = open_store(timer_wheel_enable=False)
    store.put_message(timer_msg(int(time.time() * 1000) + 60_000))
    assert store.timers is None
    assert not (tmp_path / "store" / "timer").exists()


def pending(store) -> dict[str, tuple[int, int]]:
    return {t.topic: (t.count, t.earliest_due_ms) for t in store.timers.pending.by_topic()}


def test_pending_timers_are_counted_per_real_topic_and_survive_restart_crash_and_truncation(open_store, tmp_path):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    offsets = put_timers(store, 10, due)  # TopicTest, due at due, due+1s, due+2s
    store.put_message(timer_msg(due + 90_500, "Other"))
    store.put_message(timer_msg(due + 30_000, "Other"))
    expected = {"TopicTest": (10, due), "Other": (2, due + 30_000)}
    assert pending(store) == expected
    assert store.timers.pending.scheduled == 12
    store.shutdown()
    assert pending(open_store()) == expected, "counted again at open"

    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed)
    for name in os.listdir(crashed / "timer" / "log"):  # the TimerLog lost its tail: re-dispatched
        os.truncate(crashed / "timer" / "log" / name, 48 * 3)
    crashed_store = open_store(crashed)
    assert pending(crashed_store) == expected
    crashed_store.truncate(offsets[6])  # the last four TopicTest timers and both Other timers go
    assert pending(crashed_store) == {"TopicTest": (6, due)}


def fire_first(store, due: int) -> None:
    """The timer service's part: the slots up to ``due`` are taken and recorded as fired."""
    due_offsets(store, due)
    store.timers.mark_fired(due + 1000)


def test_a_lost_timer_directory_is_rebuilt_without_the_fired_timers(open_store, tmp_path):
    """docs/timers.md#a-lost-timer-directory: after a clean stop and `rm -r timer/`, the pending
    timers are indexed again from the CommitLog; the fired ones are not (they would fire twice)."""
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    put_timers(store, 10, due)  # fired below (the store's clock is not the wall clock here)
    pending = put_timers(store, 10, due + 60_000)
    fire_first(store, due + 2000)
    store.shutdown()
    shutil.rmtree(tmp_path / "store" / "timer")
    reopened = open_store()
    assert reopened.timers.fired_ms == due + 3000
    assert due_offsets(reopened, due + 65_000) == pending


def test_after_a_kill_9_a_lost_timer_directory_is_rebuilt_without_the_fired_timers(open_store, tmp_path):
    store = open_store()
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    put_timers(store, 10, due)
    pending = put_timers(store, 10, due + 60_000)
    fire_first(store, due + 2000)
    store.flusher.flush_consume_queues()  # the flush that follows firing within a second
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed, ignore=shutil.ignore_patterns("timer"))  # kill -9, timer/ gone
    assert due_offsets(open_store(crashed), due + 65_000) == pending


# ------------------------------------------------------------ retention (docs/timers.md#retention)

HOUR_MS = 3_600_000
RETAINING = dict(file_reserved_time=1, delete_when=";".join(f"{h:02d}" for h in range(24)),
                 disk_space_clean_forcibly_ratio=100, disk_space_warning_level_ratio=100, disk_max_used_space_ratio=95,
                 mapped_file_size_timer_log=48 * 4)


def fill(store, count: int) -> None:
    for _ in range(count):
        store.put_message(make_msg(body=b"r" * 900))


def test_commit_log_retention_keeps_the_record_of_a_timer_not_yet_fired(open_store, tmp_path):
    store = open_store(**RETAINING)
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    fill(store, 30)
    phys = store.put_message(make_msg(TIMER_TOPIC, 0, body=b"the timer's body", **{
        Prop.TIMER_OUT_MS: str(due), Prop.REAL_TOPIC: "Later", Prop.REAL_QID: "0"})).wrote_offset
    fill(store, 300)
    files = len(os.listdir(tmp_path / "store" / "commitlog"))
    later = int(time.time() * 1000) + 2 * HOUR_MS  # every file is past fileReservedTime by then

    result = store.clean(later)
    assert result.timer_floor == phys
    assert result.commit_log_files == 0 < phys  # the first file holds the timer, so it and all after it stay
    assert store.min_phy_offset == 0 and pending(store) == {"Later": (1, due)}
    slot = store.timers.take(due + 1000)
    assert decode_record(store.look_message_by_offset(slot.records[0].phys))[0].body == b"the timer's body"

    store.timers.mark_fired(due + 1000)  # fired: its record may go now
    store.timers.pending.remove("Later", due)
    result = store.clean(later)
    assert result.timer_floor is None and result.commit_log_files == files - 1


def test_a_full_disk_takes_the_record_of_a_timer_not_yet_fired_and_says_so(open_store, caplog):
    store = open_store(**dict(RETAINING, disk_space_clean_forcibly_ratio=0))
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    put_timers(store, 2, due)
    fill(store, 300)
    result = store.clean(int(time.time() * 1000))  # over diskSpaceCleanForciblyRatio: files go unexpired
    assert result.commit_log_files > 0 and result.timers_lost == 2
    assert "2 timer(s) not yet fired" in caplog.text


def test_fired_timer_log_files_go_and_a_restart_and_a_lost_timer_directory_still_work(open_store, tmp_path):
    store = open_store(**RETAINING)
    due = (int(time.time() * 1000) // 1000 + 60) * 1000
    put_timers(store, 10, due)  # fired below (the store's clock is not the wall clock here)
    waiting = put_timers(store, 10, due + 60_000)
    fire_first(store, due + 2000)
    result = store.clean(int(time.time() * 1000))
    assert result.timer_log_files == 2  # 4 records a file: [f f f f] [f f f f] [f f w w] [w w w w] [w w w w]
    assert len(os.listdir(tmp_path / "store" / "timer" / "log")) == 3
    store.shutdown()

    reopened = open_store(**RETAINING)
    assert pending(reopened) == {"TopicTest": (10, due + 60_000)}
    assert reopened.clean(int(time.time() * 1000)).timer_log_files == 0
    reopened.shutdown()
    shutil.rmtree(tmp_path / "store" / "timer")
    rebuilt = open_store(**RETAINING)
    assert pending(rebuilt) == {"TopicTest": (10, due + 60_000)}
    assert due_offsets(rebuilt, due + 65_000) == waiting
