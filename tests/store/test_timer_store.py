"""The timing store (docs/timers.md) on real files: slots, many timers in one second, reopening,
a crash with unsynced state, files cut mid-record, CommitLog truncation, rounds, bounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ferrymq.store.timer_log import RECALL_MARKER, RECORD_SIZE, TimerRecord
from ferrymq.store.timer_store import TimerStore

T0 = 1_700_000_000_000  # a whole second
SIZE = 100  # every fake CommitLog record is 100 bytes


def timers(deliveries: list[int], first_phys: int = 0) -> list[tuple[int, int, int]]:
    return [(deliver, first_phys + i * SIZE, SIZE) for i, deliver in enumerate(deliveries)]


def open_store(path, now=T0, **kw) -> TimerStore:
    store = TimerStore(str(path), **kw)
    store.open(now)
    return store


def take_all(store: TimerStore, now: int) -> dict[int, list[int]]:
    """slot time -> CommitLog offsets, for every slot due by ``now``."""
    out = {}
    while (taken := store.take(now)) is not None:
        out[taken.slot_ms] = [r.phys for r in taken.records]
    return out


def test_a_slot_fires_its_timers_in_arrival_order_and_not_before_its_time(tmp_path):
    store = open_store(tmp_path)
    assert store.add(timers([T0 + 3000, T0 + 1500, T0 + 3999, T0 + 5000])) == 4
    assert store.take(T0 + 999) is None  # nothing due in the first second
    assert store.next_due_ms(T0 + 10_000) == T0 + 1000
    assert take_all(store, T0 + 3000) == {T0 + 1000: [100], T0 + 3000: [0, 200]}
    assert store.next_due_ms(T0 + 10_000) == T0 + 5000
    assert take_all(store, T0 + 10_000) == {T0 + 5000: [300]}
    store.close()


def test_many_timers_in_one_second(tmp_path):
    store = open_store(tmp_path)
    n = 20_000
    store.add(timers([T0 + 7000 + i % 1000 for i in range(n)]))
    slot_ms, records, _, last = store.take(T0 + 7000)
    assert slot_ms == T0 + 7000 and last
    assert [r.phys for r in records] == [i * SIZE for i in range(n)]
    assert store.take(T0 + 7000) is None
    store.close()


def test_a_slot_larger_than_a_part_is_taken_whole_in_arrival_order(tmp_path):
    """200 000 timers due in one second once lost all but the newest 100 000 (the take's cap cut
    the chain and the slot counted as fired). Now a slot comes in parts, the last one flagged,
    each with the whole slot's recall markers; a truncation mid-slot hands it out again."""
    store = open_store(tmp_path)
    n = 2_500
    store.add(timers([T0 + 7000 + i % 1000 for i in range(n)]))
    parts = []
    while (taken := store.take(T0 + 7000, max_records=1_000)) is not None:
        parts.append(taken)
    assert [(p.slot_ms, len(p.records), p.last) for p in parts] == [
        (T0 + 7000, 1_000, False), (T0 + 7000, 1_000, False), (T0 + 7000, 500, True)]
    assert [r.phys for p in parts for r in p.records] == [i * SIZE for i in range(n)]

    store.rewind_taken()
    first = store.take(T0 + 7000, max_records=1_000)
    assert [r.phys for r in first.records] == [i * SIZE for i in range(1_000)] and not first.last
    store.truncate_phys(n * SIZE)  # nothing removed, but the slot in parts is given up: taken again
    again = store.take(T0 + 7000, max_records=5_000)
    assert [r.phys for r in again.records] == [i * SIZE for i in range(n)] and again.last
    store.close()


def test_interleaved_slots_across_many_log_segments_are_taken_whole_and_in_order(tmp_path):
    """Records are read a run at a time (a slot's chain backwards, a part's records forwards):
    two slots whose records alternate, over segments of 7 records, come out each whole and in
    arrival order, however the runs fall on segment ends."""
    store = open_store(tmp_path, log_segment_size=7 * RECORD_SIZE)
    n = 1_000
    store.add(timers([T0 + 2000 + (i % 2) * 1000 for i in range(n)] + [T0 + 2000] * 30))
    parts = {}
    while (taken := store.take(T0 + 3000, max_records=97)) is not None:
        parts.setdefault(taken.slot_ms, []).extend(r.phys for r in taken.records)
    assert parts == {T0 + 2000: [i * SIZE for i in range(0, n, 2)] + [(n + i) * SIZE for i in range(30)],
                     T0 + 3000: [i * SIZE for i in range(1, n, 2)]}
    store.close()


def test_a_re_dispatch_of_indexed_records_adds_nothing(tmp_path):
    store = open_store(tmp_path)
    batch = timers([T0 + 2000, T0 + 3000])
    store.add(batch)
    assert store.add(batch) == 0
    assert store.add(batch + timers([T0 + 4000], first_phys=200)) == 1
    assert store.dispatched_phys_end == 300
    store.close()


def test_a_timer_due_before_the_reader_goes_to_the_slot_being_read_next(tmp_path):
    store = open_store(tmp_path)
    store.add(timers([T0 + 2000]))
    assert take_all(store, T0 + 5000) == {T0 + 2000: [0]}
    store.add(timers([T0 + 1000], first_phys=100))  # due already: never behind the reader
    assert take_all(store, T0 + 6000) == {T0 + 6000: [100]}
    store.close()


def test_reopen_keeps_pending_timers_and_the_fired_checkpoint(tmp_path):
    store = open_store(tmp_path)
    store.add(timers([T0 + 1000, T0 + 2000, T0 + 2000, T0 + 9000]))
    assert take_all(store, T0 + 1000) == {T0 + 1000: [0]}
    store.mark_fired(T0 + 2000)
    store.close()

    store = open_store(tmp_path, now=T0 + 50_000)  # the clock moved on: firing resumes where it was
    assert store.fired_ms == T0 + 2000
    assert take_all(store, T0 + 50_000) == {T0 + 2000: [100, 200], T0 + 9000: [300]}
    assert store.dispatched_phys_end == 400
    store.close()


def test_an_unfired_slot_taken_before_a_restart_is_taken_again(tmp_path):
    store = open_store(tmp_path)
    store.add(timers([T0 + 1000]))
    assert take_all(store, T0 + 1000) == {T0 + 1000: [0]}  # taken, never marked fired
    store.close()
    store = open_store(tmp_path)
    assert take_all(store, T0 + 1000) == {T0 + 1000: [0]}  # at-least-once
    store.close()


CRASHING_WRITER = textwrap.dedent("""
    import os, sys
    from ferrymq.store.timer_store import TimerStore
    path, T0, synced, unsynced = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = TimerStore(path)
    store.open(T0)
    phys = 0
    def add(n):
        global phys
        for i in range(n):
            store.add([(T0 + 1000 * (1 + phys // 100 % 5), phys, 100)])
            phys += 100
    add(synced)
    store.sync()
    add(unsynced)
    os._exit(0)  # like kill -9: nothing flushed or closed
""")


def crash_after(path, synced: int, unsynced: int) -> None:
    subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path), str(T0), str(synced), str(unsynced)],
                   check=True, timeout=60)


def expected(count: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i in range(count):
        out.setdefault(T0 + 1000 * (1 + i % 5), []).append(i * 100)
    return dict(sorted(out.items()))


def test_a_crash_with_unsynced_records_loses_no_timer(tmp_path):
    crash_after(tmp_path, synced=23, unsynced=17)
    store = open_store(tmp_path)
    assert take_all(store, T0 + 10_000) == expected(40)
    store.close()


def log_file(path):
    log_dir = os.path.join(path, "log")
    return os.path.join(log_dir, sorted(os.listdir(log_dir))[-1])


@pytest.mark.parametrize("synced", [30, 10], ids=["cut-after-the-synced-position", "cut-before-it"])
def test_a_log_cut_mid_record_loses_only_the_cut_records(tmp_path, synced):
    crash_after(tmp_path, synced=synced, unsynced=40 - synced)
    path = log_file(tmp_path)
    keep = 20 * RECORD_SIZE + RECORD_SIZE // 2  # the 21st record half written
    with open(path, "r+b") as f:
        f.truncate(keep)
    store = open_store(tmp_path)
    assert store.dispatched_phys_end == 20 * 100  # the CommitLog's records from the 21st are re-dispatched
    assert os.path.getsize(path) == 20 * RECORD_SIZE
    store.add([(T0 + 1000 * (1 + i % 5), i * 100, 100) for i in range(40)])  # the store's re-dispatch
    assert take_all(store, T0 + 10_000) == expected(40)
    store.close()


def test_a_torn_record_is_not_read_as_a_timer(tmp_path):
    crash_after(tmp_path, synced=5, unsynced=5)
    path = log_file(tmp_path)
    with open(path, "r+b") as f:  # the last record's second half never reached the disk
        f.seek(9 * RECORD_SIZE + 24)
        f.write(bytes(RECORD_SIZE - 24))
    store = open_store(tmp_path)
    assert store.dispatched_phys_end == 900
    assert take_all(store, T0 + 10_000) == expected(9)
    store.close()


def test_a_commit_log_truncation_forgets_the_timers_past_it(tmp_path):
    store = open_store(tmp_path)
    store.add(timers([T0 + 1000, T0 + 2000, T0 + 1000, T0 + 2000, T0 + 1000, T0 + 3000]))
    store.sync()
    assert store.truncate_phys(250) == 3  # records at 300, 400, 500 go
    assert store.dispatched_phys_end == 300
    store.add(timers([T0 + 2000], first_phys=300))  # the new master's history
    assert take_all(store, T0 + 10_000) == {T0 + 1000: [0, 200], T0 + 2000: [100, 300]}
    store.close()
    store = open_store(tmp_path)
    assert take_all(store, T0 + 10_000) == {T0 + 1000: [0, 200], T0 + 2000: [100, 300]}
    store.close()


def test_a_later_round_is_chained_behind_an_unfired_slot_never_over_it(tmp_path):
    # a 4-slot wheel (2 s of max delay): T0+1 s and T0+5 s share a slot
    store = open_store(tmp_path, max_delay_sec=2)
    store.add(timers([T0 + 1000]))
    store.add(timers([T0 + 5000], first_phys=100))  # the broker fell behind: slot still unfired
    slot_ms, records, _, _ = store.take(T0 + 1000)
    assert slot_ms == T0 + 1000
    assert [(r.deliver_ms, r.phys) for r in records] == [(T0 + 1000, 0), (T0 + 5000, 100)]  # caller re-stores the 2nd
    store.close()


def test_a_fired_slot_is_reused_by_a_later_round(tmp_path):
    store = open_store(tmp_path, max_delay_sec=2)
    store.add(timers([T0 + 1000]))
    assert take_all(store, T0 + 1000) == {T0 + 1000: [0]}
    store.add(timers([T0 + 5000], first_phys=100))
    assert take_all(store, T0 + 5000) == {T0 + 5000: [100]}
    store.close()


MEMORY_PROBE = textwrap.dedent("""
    import sys
    from ferrymq.store.timer_store import TimerStore
    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    path, count = sys.argv[1], int(sys.argv[2])
    T0 = 1_700_000_000_000
    store = TimerStore(path)
    store.open(T0)
    store.add([(T0 + 1000, 0, 100)])  # warm: code paths and the first buffers
    before = rss_kib()
    batch = 1000
    for n, start in enumerate(range(1, count, batch), 1):
        store.add([(T0 + 1000 + (i * 7919 % 259_000) * 1000, i * 100, 100) for i in range(start, min(start + batch, count))])
        if n % 10 == 0:  # as the flush thread does every second (10 000 timers: a second at 10 000/s)
            store.sync()
    store.sync()
    print(rss_kib() - before)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to read a process's RSS")
def test_memory_does_not_grow_with_pending_timers(tmp_path):
    """200 000 timers over three days: RSS grows by far less than their records (9.6 MB); the
    1 000 000-timer figure is bench/timer_store_bench.py's."""
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(tmp_path), "200000"], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    growth_kib = int(out.strip())
    assert growth_kib < 4 * 1024, f"RSS grew by {growth_kib} KiB for 200 000 timers"


def test_a_recall_markers_flag_is_kept_across_a_reopen_and_covered_by_the_crc(tmp_path):
    """docs/timers.md#recall: a marker's record carries RECALL_MARKER, so firing reads markers
    first without holding the slot's messages; a record without flags reads as before flags."""
    store = open_store(tmp_path)
    store.add(timers([T0 + 1000, T0 + 1000, T0 + 1000]), markers={100})
    store.close()
    store = open_store(tmp_path)
    slot_ms, records, markers, _ = store.take(T0 + 1000)
    assert [r.phys for r in markers] == [100]
    assert [(r.phys, r.flags) for r in records] == [(0, 0), (100, RECALL_MARKER), (200, 0)]
    store.close()
    with open(log_file(tmp_path), "r+b") as f:  # the marker's flags word, changed on disk
        f.seek(RECORD_SIZE + 44)
        f.write((3).to_bytes(4, "big"))
    plain = TimerRecord(T0, 0, -1, T0, SIZE, 1)
    assert TimerRecord.decode(plain.encode()) == plain
    with open(log_file(tmp_path), "rb") as f:
        data = f.read()
    assert TimerRecord.decode(data[RECORD_SIZE:2 * RECORD_SIZE]) is None  # the CRC covers the flags
    assert TimerRecord.decode(data[2 * RECORD_SIZE:]).flags == 0


def test_a_slave_adopts_its_masters_fired_time_forward_only_and_durably(tmp_path):
    """docs/timers.md#slaves: a timer before the copied time is filed at that time (so a promoted
    slave still fires it); the copied time survives a kill (no close) and never moves back."""
    store = open_store(tmp_path)
    assert store.adopt_fired(T0 + 5000)
    assert not store.adopt_fired(T0 + 2000)  # an older master's answer: ignored
    assert store.checkpoint()[0] == T0 + 5000
    store.add(timers([T0 + 3000, T0 + 8000]))
    assert take_all(store, T0 + 10_000) == {T0 + 5000: [0], T0 + 8000: [100]}
    # No close: what adopt_fired wrote is on disk by itself.
    reopened = open_store(tmp_path, now=T0)
    assert reopened.fired_ms == T0 + 5000
    reopened.close()
    store.close()


def test_a_slaves_pending_counts_follow_the_fired_time_it_adopts(tmp_path):
    """docs/timers.md#operator-views: a slave fires nothing; the timers of the slots its master
    fired leave its counts when it adopts the master's time, the later ones stay."""
    store = open_store(tmp_path)
    topics = {0: "A", 100: "A", 200: "B", 300: "A", 400: "B"}
    store.add([(*t, topics[t[1]]) for t in timers([T0 + 1000, T0 + 1500, T0 + 2000, T0 + 65_000, T0 + 9000])])
    store.add([(T0 + 2000, 500, SIZE, "B")], markers={500})  # a recall marker: never counted
    counts = lambda: {t.topic: (t.count, t.earliest_due_ms) for t in store.pending.by_topic()}  # noqa: E731
    assert counts() == {"A": (3, T0 + 1000), "B": (2, T0 + 2000)}
    assert store.adopt_fired(T0 + 2000, lambda r: topics.get(r.phys))
    assert counts() == {"A": (1, T0 + 65_000), "B": (2, T0 + 2000)}
    assert store.adopt_fired(T0 + 10_000, lambda r: topics.get(r.phys))
    assert counts() == {"A": (1, T0 + 65_000)}
    assert not store.adopt_fired(T0 + 5000, lambda r: topics.get(r.phys))  # never back
    # a span longer than the wheel's: counted again from the log
    assert store.adopt_fired(T0 + 10_000 + 2 * 259_200_000, lambda r: topics.get(r.phys))
    assert counts() == {}
    store.close()


def segment_count(path) -> int:
    return len(os.listdir(os.path.join(path, "log")))


def fire_up_to(store: TimerStore, now: int) -> None:
    take_all(store, now)
    store.mark_fired(now - now % 1000 + 1000)


def test_a_timer_log_segment_goes_once_all_its_timers_fired_oldest_first_never_the_one_written(tmp_path):
    # 4 records per segment: [1s 1s 9s 1s] [2s 2s 2s 2s] [3s 3s 3s 3s] [3s]
    store = open_store(tmp_path, log_segment_size=4 * RECORD_SIZE)
    store.add(timers([T0 + 1000, T0 + 1000, T0 + 9000, T0 + 1000] + [T0 + 2000] * 4 + [T0 + 3000] * 5))
    assert segment_count(tmp_path) == 4
    assert store.oldest_unfired_phys() == 0
    fire_up_to(store, T0 + 3500)
    assert store.delete_fired() == 0  # the first holds a timer due at 9 s: nothing after it goes either
    assert store.oldest_unfired_phys() == 2 * SIZE
    fire_up_to(store, T0 + 9000)
    assert store.delete_fired() == 3  # the last one (being written) stays
    assert segment_count(tmp_path) == 1 and store.oldest_unfired_phys() is None
    store.add(timers([T0 + 20_000], first_phys=13 * SIZE))
    assert store.oldest_unfired_phys() == 13 * SIZE
    store.close()
    store = open_store(tmp_path, now=T0 + 10_000, log_segment_size=4 * RECORD_SIZE)  # the latest times are scanned again
    assert store.delete_fired() == 0 and segment_count(tmp_path) == 1
    assert take_all(store, T0 + 30_000) == {T0 + 20_000: [13 * SIZE]}
    store.mark_fired(T0 + 30_000)
    assert store.unfired_below(10**9) == 0
    store.close()


def test_after_segments_were_deleted_a_restart_a_crash_and_a_truncation_keep_the_pending_timers(tmp_path):
    store = open_store(tmp_path, log_segment_size=2 * RECORD_SIZE)
    store.add(timers([T0 + 1000] * 6 + [T0 + 50_000] * 3))
    fire_up_to(store, T0 + 2000)
    assert store.delete_fired() == 3
    store.add(timers([T0 + 60_000], first_phys=9 * SIZE))
    # a crash: nothing synced since the deletion
    crashed = tmp_path / "crashed"
    subprocess.run(["cp", "-r", str(tmp_path / "log"), str(tmp_path / "wheel"), str(tmp_path / "checkpoint"),
                    str(crashed.mkdir() or crashed)], check=True)
    store.close()
    for path in (tmp_path, crashed):
        again = open_store(path, now=T0 + 3000, log_segment_size=2 * RECORD_SIZE)
        assert again.unfired_below(10**9) == 4
        again.truncate_phys(9 * SIZE)
        assert take_all(again, T0 + 70_000) == {T0 + 50_000: [6 * SIZE, 7 * SIZE, 8 * SIZE]}
        again.close()


def test_a_timer_due_beyond_the_roll_window_of_its_record_is_filed_at_the_windows_end(tmp_path):
    # a 10-slot window: due 25 s after its record was stored -> at 10 s; 12 s -> (2 s left, under a
    # third of the window) at 5 s; 9 s -> its own second
    store = open_store(tmp_path, max_delay_sec=60, roll_window_slots=10)
    store.add([(T0 + 25_000, 0, SIZE, "T", T0), (T0 + 12_000, SIZE, SIZE, "T", T0), (T0 + 9_500, 2 * SIZE, SIZE, "T", T0)])
    slots = take_all(store, T0 + 30_000)
    assert slots == {T0 + 5000: [SIZE], T0 + 9000: [2 * SIZE], T0 + 10_000: [0]}
    store.close()


def test_adding_timers_never_waits_for_a_sync_on_a_slow_disk(tmp_path, monkeypatch):
    """The flush thread's sync fdatasyncs without the store's lock: dispatch (on the broker's
    event loop) adds timers while the disk takes its time, and what was added during the sync is
    kept (a slow disk is a fault the test cannot cause: fdatasync is held on an event)."""
    import threading

    import ferrymq.store.timer_log as timer_log
    import ferrymq.store.timer_store as timer_store
    import ferrymq.store.timer_wheel as timer_wheel

    store = open_store(tmp_path, log_segment_size=50 * RECORD_SIZE)
    store.add(timers([T0 + 2000 + (i % 3) * 1000 for i in range(120)]))  # three segments, two filled
    syncing, release = threading.Event(), threading.Event()
    real = timer_store.fdatasync

    def slow_fdatasync(fd: int) -> None:
        syncing.set()
        assert release.wait(10)
        real(fd)

    for module in (timer_store, timer_log, timer_wheel):
        monkeypatch.setattr(module, "fdatasync", slow_fdatasync)
    flusher = threading.Thread(target=store.sync)
    flusher.start()
    assert syncing.wait(10)
    added = threading.Thread(target=store.add, args=(timers([T0 + 3000, T0 + 9000], first_phys=120 * SIZE),))
    added.start()
    added.join(5)
    assert not added.is_alive(), "adding timers waited for the sync's fdatasync"
    release.set()
    flusher.join(10)
    store.sync()
    store.close()
    monkeypatch.undo()

    again = open_store(tmp_path, log_segment_size=50 * RECORD_SIZE)
    assert take_all(again, T0 + 10_000) == {
        T0 + 2000: [i * SIZE for i in range(0, 120, 3)],
        T0 + 3000: [i * SIZE for i in range(1, 120, 3)] + [120 * SIZE],
        T0 + 4000: [i * SIZE for i in range(2, 120, 3)],
        T0 + 9000: [121 * SIZE]}
    again.close()
