"""Flush policies: SYNC_FLUSH group commit, ASYNC_FLUSH least pages / thorough flushes, and the
checkpoint that follows them."""

import threading

from store_helpers import make_msg

from ferrymq.store import PutStatus
from ferrymq.store.checkpoint import read_checkpoint


def test_sync_flush_put_returns_after_its_fsync(open_store, tmp_path):
    store = open_store(flush_disk_type="SYNC_FLUSH")
    result = store.put_message(make_msg())
    assert result.status is PutStatus.PUT_OK
    assert store.commit_log.flushed_offset >= result.wrote_offset + result.wrote_bytes
    assert read_checkpoint(tmp_path / "store" / "checkpoint")["physicFlushedOffset"] >= result.wrote_offset + result.wrote_bytes


def test_concurrent_sync_puts_share_fsyncs(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH")
    results, lock = [], threading.Lock()
    start = threading.Barrier(16)

    def writer(queue_id):
        start.wait()
        for _ in range(25):
            r = store.put_message(make_msg(queue_id=queue_id % 4))
            with lock:
                results.append(r)

    threads = [threading.Thread(target=writer, args=(q,)) for q in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 400 and all(r.status is PutStatus.PUT_OK for r in results)
    stats = store.group_commit.stats
    assert stats.acks == 400
    assert stats.fsyncs < stats.acks  # 16 writers waiting at once: fsyncs are shared
    assert stats.largest_group > 1
    assert store.commit_log.flushed_offset == store.max_phy_offset


def test_wait_false_is_answered_without_waiting_and_flushed_soon_after(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=0)
    waited = store.put_message(make_msg())
    assert waited.status is PutStatus.FLUSH_DISK_TIMEOUT  # a 0 ms budget: no fsync can be that fast
    assert waited.ok and "syncFlushTimeout" in waited.remark
    no_wait = store.put_message(make_msg(WAIT="false"))
    assert no_wait.status is PutStatus.PUT_OK  # not waited for at all
    flushed = threading.Event()
    store.request_flush(no_wait.wrote_offset + no_wait.wrote_bytes, lambda ok: flushed.set())
    assert flushed.wait(10)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2  # both stored


def test_async_flush_waits_for_enough_dirty_pages(open_store):
    store = open_store(flush_commit_log_least_pages=4, flush_commit_log_thorough_interval=3_600_000)
    store.flush_commit_log_timed()  # the first timed flush is a thorough one
    small = store.put_message(make_msg(body=b"x" * 100))
    assert store.flush_commit_log_timed() == small.wrote_offset  # 1 dirty page < 4: not flushed
    for _ in range(20):
        store.put_message(make_msg(body=b"x" * 1000))  # ~20 KiB: 5 pages
    assert store.flush_commit_log_timed() == store.max_phy_offset


def test_async_flush_thorough_interval_flushes_a_single_page(open_store):
    store = open_store(flush_commit_log_least_pages=4, flush_commit_log_thorough_interval=0)
    r = store.put_message(make_msg(body=b"x" * 100))
    assert store.flush_commit_log_timed() == r.wrote_offset + r.wrote_bytes


def test_consume_queue_timer_moves_the_checkpoint_only_on_thorough_flushes(open_store, tmp_path):
    store = open_store(flush_consume_queue_thorough_interval=3_600_000)
    store.commit_log.clock = lambda: 1_700_000_000_000
    store.put_message(make_msg(KEYS="k"))
    store.flush_consume_queues_timed()  # first one: thorough
    cp = read_checkpoint(tmp_path / "store" / "checkpoint")
    assert cp["logicsMsgTimestamp"] == cp["indexMsgTimestamp"] == 1_700_000_000_000
    store.commit_log.clock = lambda: 1_700_000_009_000
    store.put_message(make_msg(KEYS="k"))
    store.flush_consume_queues_timed()  # not thorough: the checkpoint keeps its times
    assert read_checkpoint(tmp_path / "store" / "checkpoint")["logicsMsgTimestamp"] == 1_700_000_000_000
    store.flush_commit_log()
    assert read_checkpoint(tmp_path / "store" / "checkpoint")["physicMsgTimestamp"] == 1_700_000_009_000


def test_clean_shutdown_leaves_a_complete_checkpoint(open_store, tmp_path):
    store = open_store()
    store.commit_log.clock = lambda: 1_700_000_123_000
    store.put_message(make_msg(KEYS="k"))
    end = store.max_phy_offset
    fired_ms = store.timers.fired_ms
    store.shutdown()
    assert read_checkpoint(tmp_path / "store" / "checkpoint") == {
        "physicMsgTimestamp": 1_700_000_123_000, "logicsMsgTimestamp": 1_700_000_123_000,
        "indexMsgTimestamp": 1_700_000_123_000, "physicFlushedOffset": end,
        "confirmPhyOffset": 0,
        "timerFiredMs": fired_ms}  # a copy kept outside timer/ (docs/timers.md#a-lost-timer-directory)
    assert (tmp_path / "store" / "checkpoint").stat().st_size == 4096
