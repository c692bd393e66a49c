"""The store's dispatch feeds the timing store from the timer topic's records (docs/timers.md):
on put, after a kill -9 (re-dispatch from the CommitLog), and on a CommitLog truncation."""

from __future__ import annotations

import os
import shutil
import time

from store_helpers import make_msg

from ferrymq.common.message import Prop
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
