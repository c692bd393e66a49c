import itertools
import os
import time

import pytest
from store_helpers import STORE_HOST, make_msg

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import MessageExt, SysFlag, decode_record, decode_records
from ferrymq.common.message_id import offset_msg_id
from ferrymq.store import GetStatus, PutStatus, StoreNotRunningError
from ferrymq.store.consume_queue import CQ_ENTRY, ConsumeQueue


def put_all(store, msgs):
    results = [store.put_message(m) for m in msgs]
    assert all(r.status is PutStatus.PUT_OK for r in results), results
    return results


def pull_all(store, topic, queue_id, batch=32, tag_filter=None):
    records, offset = [], 0
    while True:
        result = store.get_messages("g", topic, queue_id, offset, batch, tag_filter)
        if result.status is not GetStatus.FOUND:
            return records
        records += result.records
        offset = result.next_begin_offset


# ------------------------------------------------------------------ put and read back


def test_records_read_back_byte_identical(open_store):
    store = open_store()
    msgs = [
        make_msg(queue_id=i % 2, body=f"body-{i}".encode() * (i + 1), tags=f"Tag{i % 3}", KEYS=f"k{i}", UNIQ_KEY=f"U{i}")
        for i in range(40)
    ]
    msgs[5].born_host = ("2001:db8::7", 40000)  # an IPv6 producer
    msgs[6].body = b""
    msgs[7].flag = 99
    results = put_all(store, msgs)
    for queue_id in (0, 1):
        mine = [m for m in msgs if m.queue_id == queue_id]
        records = pull_all(store, "TopicTest", queue_id)
        decoded = decode_records(b"".join(records), check_crc=True)
        assert decoded == mine  # every field, including offsets and store time the store set
        assert [m.queue_offset for m in decoded] == list(range(20))
        for record, m in zip(records, decoded):
            assert store.look_message_by_offset(m.commit_log_offset) == record
    for r, m in zip(results, msgs):
        assert r.msg_ids == [offset_msg_id(*STORE_HOST, m.commit_log_offset)] and r.msg_num == 1
        assert (r.wrote_offset, r.queue_offset, r.store_timestamp) == (m.commit_log_offset, m.queue_offset, m.store_timestamp)
        assert r.wrote_bytes == m.store_size and m.store_host == STORE_HOST
    assert store.max_phy_offset == sum(m.store_size for m in msgs)


def test_physical_offsets_are_contiguous(open_store):
    store = open_store()
    results = put_all(store, [make_msg(queue_id=i % 3) for i in range(10)])
    for before, after in itertools.pairwise(results):
        assert after.wrote_offset == before.wrote_offset + before.wrote_bytes


def test_consume_queue_entries(open_store, tmp_path):
    store = open_store()
    msgs = [make_msg(queue_id=2, tags=tag) for tag in ("TagA", None, "x y")]
    put_all(store, msgs)
    raw = (tmp_path / "store" / "consumequeue" / "TopicTest" / "2" / "00000000000000000000").read_bytes()
    assert len(raw) == 20 * 100
    got = list(CQ_ENTRY.iter_unpack(raw[:60]))
    assert got == [
        (msgs[0].commit_log_offset, msgs[0].store_size, 2598919),
        (msgs[1].commit_log_offset, msgs[1].store_size, 0),
        (msgs[2].commit_log_offset, msgs[2].store_size, java_string_hash("x y")),
    ]
    assert raw[60:] == bytes(len(raw) - 60)


def test_batch_put(open_store):
    store = open_store()
    put_all(store, [make_msg(queue_id=1)])
    batch = [make_msg(queue_id=1, body=bytes([i]) * 10, UNIQ_KEY=f"U{i}") for i in range(5)]
    result = store.put_messages(batch)
    assert result.status is PutStatus.PUT_OK
    assert (result.queue_offset, result.msg_num) == (1, 5)
    assert [m.queue_offset for m in batch] == [1, 2, 3, 4, 5]
    assert result.wrote_bytes == sum(m.store_size for m in batch)
    for before, after in itertools.pairwise(batch):
        assert after.commit_log_offset == before.commit_log_offset + before.store_size
    assert result.msg_ids == [offset_msg_id(*STORE_HOST, m.commit_log_offset) for m in batch]
    assert result.msg_id == ",".join(result.msg_ids)
    assert len({m.store_timestamp for m in batch}) == 1
    assert decode_records(b"".join(pull_all(store, "TopicTest", 1)))[1:] == batch


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda b: setattr(b[1], "queue_id", 9), "same topic and queue"),
        (lambda b: setattr(b[1], "topic", "Other"), "same topic and queue"),
        (lambda b: setattr(b[0], "delay_level", 2), "delay"),
        (lambda b: setattr(b[0], "sys_flag", SysFlag.TRANSACTION_PREPARED_TYPE), "transactional"),
    ],
)
def test_bad_batches_are_refused(open_store, mutate, fragment):
    store = open_store()
    batch = [make_msg(), make_msg()]
    mutate(batch)
    result = store.put_messages(batch)
    assert result.status is PutStatus.MESSAGE_ILLEGAL and fragment in result.remark
    assert store.max_phy_offset == 0
    assert store.put_messages([]).status is PutStatus.MESSAGE_ILLEGAL


# ------------------------------------------------------------------ limits


def test_oversized_body_is_refused_and_nothing_written(open_store, tmp_path):
    store = open_store(max_message_size=1000)
    result = store.put_message(make_msg(body=b"x" * 1001))
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "1001" in result.remark and "1000" in result.remark
    assert store.max_phy_offset == 0
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0
    assert os.listdir(tmp_path / "store" / "commitlog") == []
    assert os.listdir(tmp_path / "store" / "consumequeue") == []
    assert store.put_message(make_msg(body=b"x" * 1000)).status is PutStatus.PUT_OK  # the limit itself is fine


def test_other_limits(open_store):
    store = open_store()
    result = store.put_message(make_msg(big="v" * 40000))
    assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and "40" in result.remark
    assert store.put_message(make_msg(topic="t" * 128)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_message(make_msg(topic="../escape")).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_message(make_msg(queue_id=-1)).status is PutStatus.MESSAGE_ILLEGAL
    too_big_for_a_segment = store.put_message(make_msg(body=b"x" * 70000))  # segments are 64 KiB here
    assert too_big_for_a_segment.status is PutStatus.MESSAGE_ILLEGAL and "CommitLog file" in too_big_for_a_segment.remark
    assert store.max_phy_offset == 0


# ------------------------------------------------------------------ get statuses (docs/wire-format.md#pull-statuses)


def test_get_statuses(open_store):
    store = open_store()
    unknown = store.get_messages("g", "TopicTest", 0, 5, 32)
    assert (unknown.status, unknown.next_begin_offset, unknown.min_offset, unknown.max_offset) == (
        GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0,
    )  # fmt: skip
    put_all(store, [make_msg(tags="TagA" if i % 2 else "TagB") for i in range(10)])

    found = store.get_messages("g", "TopicTest", 0, 3, 4)
    assert (found.status, found.next_begin_offset, found.message_count) == (GetStatus.FOUND, 7, 4)
    assert (found.min_offset, found.max_offset) == (0, 10)
    assert [m.queue_offset for m in decode_records(found.body())] == [3, 4, 5, 6]
    assert found.first_store_timestamp == decode_record(found.records[0])[0].store_timestamp
    assert found.buffer_total_size == len(found.body())

    one = store.get_messages("g", "TopicTest", 0, 10, 32)
    assert (one.status, one.next_begin_offset, one.records) == (GetStatus.OFFSET_OVERFLOW_ONE, 10, [])

    # RocketMQ 4.x: past the end of a queue that never lost messages -> start over at 0
    badly = store.get_messages("g", "TopicTest", 0, 11, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)

    tag_b = java_string_hash("TagB")
    only_b = store.get_messages("g", "TopicTest", 0, 0, 32, lambda code: code == tag_b)
    assert only_b.status is GetStatus.FOUND
    assert [m.tags for m in decode_records(only_b.body())] == ["TagB"] * 5

    none = store.get_messages("g", "TopicTest", 0, 2, 32, lambda code: False)
    assert (none.status, none.next_begin_offset, none.records) == (GetStatus.NO_MATCHED_MESSAGE, 10, [])


def test_filtered_pull_scans_a_bounded_window(open_store):
    store = open_store(mapped_file_size_consume_queue=20 * 2000, mapped_file_size_commit_log=1 << 20)
    put_all(store, [make_msg(tags="Other") for _ in range(1000)])
    no_match = store.get_messages("g", "TopicTest", 0, 0, 32, lambda code: False)
    assert (no_match.status, no_match.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 800)  # 16000 B of entries
    wide = store.get_messages("g", "TopicTest", 0, 0, 1000, lambda code: False)
    assert wide.next_begin_offset == 1000  # max(16000, 1000 * 20) bytes


def test_pull_never_crosses_a_consume_queue_file(open_store):
    store = open_store()  # 100 entries per ConsumeQueue file
    put_all(store, [make_msg(body=b"") for _ in range(120)])
    result = store.get_messages("g", "TopicTest", 0, 90, 32)
    assert (result.message_count, result.next_begin_offset) == (10, 100)


def test_batch_limits_in_memory_and_on_disk(open_store):
    store = open_store(mapped_file_size_commit_log=4 << 20)
    put_all(store, [make_msg(body=b"x" * 1000) for _ in range(100)])
    assert store.get_messages("g", "TopicTest", 0, 0, 1000).message_count == 32  # maxTransferCountOnMessageInMemory
    assert store.get_messages("g", "TopicTest", 0, 0, 10).message_count == 10

    store.in_memory_window = 0  # everything now counts as on disk
    on_disk = store.get_messages("g", "TopicTest", 0, 0, 1000)
    assert on_disk.message_count == 8 and on_disk.next_begin_offset == 8  # maxTransferCountOnMessageInDisk
    assert on_disk.suggest_pull_from_slave and on_disk.fall_behind_bytes > 0

    put_all(store, [make_msg(queue_id=1, body=b"y" * 30000) for _ in range(12)])
    assert store.get_messages("g", "TopicTest", 1, 0, 32).message_count == 2  # 64 KiB on disk
    store.in_memory_window = 1 << 40
    assert store.get_messages("g", "TopicTest", 1, 0, 32).message_count == 8  # 256 KiB in memory

    put_all(store, [make_msg(queue_id=2, body=b"z" * 300_000)])
    assert store.get_messages("g", "TopicTest", 2, 0, 32).message_count == 1  # at least one, whatever its size


def test_unfiltered_pulls_of_records_in_memory_answer_as_the_general_scan(open_store):
    """A pull without a tag filter whose records are all in memory takes a short cut past the
    per-entry scan: for any sizes, limits and offsets it answers exactly as the scan does (a
    filter that passes everything takes the scan)."""
    import random

    rng = random.Random(21)
    store = open_store(mapped_file_size_commit_log=8 << 20)
    for _ in range(300):  # two queues interleaved, bodies of very different sizes
        put_all(store, [make_msg(queue_id=rng.randrange(2), body=b"x" * rng.choice([10, 900, 5000, 40000]))])
    for limits in [(32, 256 * 1024), (5, 12000), (0, 1), (1000, 1 << 30)]:
        store.config.max_transfer_count_on_message_in_memory, store.config.max_transfer_bytes_on_message_in_memory = limits
        for _ in range(60):
            queue_id = rng.randrange(2)
            top = store.get_max_offset_in_queue("TopicTest", queue_id)
            offset, max_nums = rng.randrange(top), rng.choice([1, 3, 32, 100])
            fast = store.get_messages("g", "TopicTest", queue_id, offset, max_nums)
            scanned = store.get_messages("g", "TopicTest", queue_id, offset, max_nums, lambda _tags: True)
            assert fast == scanned and fast.status is GetStatus.FOUND


def test_pulls_that_must_not_wait_for_the_disk_read_the_page_cache_or_decline(open_store, tmp_path):
    """``nowait`` pulls (the broker's on-loop reads of older data) raise NotCached instead of
    waiting when their ConsumeQueue entries or their records are not in the page cache; while
    they are, they answer exactly as ordinary pulls, filtered or not."""
    import random

    from ferrymq.store.mapped_file import NotCached
    from tests.support import evict_from_page_cache

    rng = random.Random(5)
    store = open_store(mapped_file_size_commit_log=8 << 20)
    for i in range(200):  # two queues interleaved, small and large bodies; T1 on every third
        put_all(store, [make_msg(queue_id=i % 2, body=b"y" * rng.choice([10, 3000, 20000]), tags=f"T{i % 3}")])
    tag_filter = lambda code: code == java_string_hash("T1")  # noqa: E731
    pulls = [(rng.randrange(2), rng.randrange(100), rng.choice([1, 8, 32]), rng.choice([None, tag_filter]))
             for _ in range(40)]

    def pull(queue_id, offset, nums, tags, **kw):
        return store.get_messages("g", "TopicTest", queue_id, offset, nums, tags, **kw)

    def declines(p) -> bool:
        try:
            pull(*p, nowait=True)
        except NotCached:
            return True
        return False

    root = tmp_path / "store"
    store.flush()
    for p in pulls:  # (before any ordinary pull: pages the store has mapped stay in the cache)
        # Eviction is the kernel's best effort (a CI run under load once kept a page): a pull that
        # read without waiting is tried again after another eviction, five times at most.
        for _ in range(5):
            evict_from_page_cache(root)
            entries_out = declines(p)  # its ConsumeQueue entries are on disk only
            for path in (root / "consumequeue").rglob("0" * 20):
                path.read_bytes()  # now cached; the records are not
            if entries_out and declines(p):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"pull {p} read without waiting for the disk after five evictions of its pages")
    ordinary = [pull(*p) for p in pulls]  # (they read from the disk)
    assert all(r.status is GetStatus.FOUND and r.records for r in ordinary)
    assert [pull(*p, nowait=True) for p in pulls] == ordinary


def test_message_was_removing_and_offset_found_null(open_store):
    store = open_store()
    put_all(store, [make_msg(body=b"x" * 1000) for _ in range(150)])  # 60 per CommitLog file, 100 per CQ file
    # What retention would do (not implemented yet): drop the oldest files behind the readers' backs.
    commit_log_files = store.commit_log._files
    commit_log_files.delete(commit_log_files.segments[0])
    skipped = store.get_messages("g", "TopicTest", 0, 0, 32)
    assert skipped.status is GetStatus.FOUND  # removed entries are skipped, later ones returned
    assert decode_record(skipped.records[0])[0].commit_log_offset == store.min_phy_offset

    commit_log_files.delete(commit_log_files.segments[0])  # now all of CQ file 0's records are gone
    removing = store.get_messages("g", "TopicTest", 0, 0, 32)
    assert (removing.status, removing.next_begin_offset, removing.records) == (GetStatus.MESSAGE_WAS_REMOVING, 100, [])

    cq_files = store.queues.get("TopicTest", 0)._files
    cq_files.delete(cq_files.segments[0])
    null = store.get_messages("g", "TopicTest", 0, 0, 32)
    assert (null.status, null.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, 100)


# ------------------------------------------------------------------ queries


def test_offset_and_time_queries(open_store):
    store = open_store()
    clock = iter([1000, 2000, 3000, 4000, 5000])
    store.commit_log.clock = lambda: next(clock)
    put_all(store, [make_msg() for _ in range(5)])
    assert (store.get_min_offset_in_queue("TopicTest", 0), store.get_max_offset_in_queue("TopicTest", 0)) == (0, 5)
    assert store.get_max_offset_in_queue("Nope", 0) == store.get_min_offset_in_queue("Nope", 0) == 0
    assert store.get_store_time("TopicTest", 0, 2) == 3000
    assert store.get_store_time("TopicTest", 0, 5) == -1
    assert store.get_commit_log_offset_in_queue("TopicTest", 0, 1) == decode_record(store.look_message_by_offset(
        store.get_commit_log_offset_in_queue("TopicTest", 0, 1)))[0].commit_log_offset  # fmt: skip
    assert store.get_commit_log_offset_in_queue("TopicTest", 0, 9) == -1

    search = lambda ts: store.search_offset_by_timestamp("TopicTest", 0, ts)  # noqa: E731
    assert [search(ts) for ts in (3000, 1000, 5000)] == [2, 0, 4]  # exact hits
    assert search(3400) == 2 and search(3600) == 3  # the nearer neighbour
    assert search(3500) == 2  # a tie goes to the earlier one
    assert search(0) == 0 and search(99999) == 4
    assert store.search_offset_by_timestamp("Nope", 0, 1000) == 0


def test_look_message_by_offset_rejects_non_record_offsets(open_store):
    store = open_store()
    (result,) = put_all(store, [make_msg()])
    assert store.look_message_by_offset(result.wrote_offset + 1) is None
    assert store.look_message_by_offset(store.max_phy_offset) is None
    assert store.look_message_by_offset(-5) is None


def test_is_in_memory(open_store):
    store = open_store()
    put_all(store, [make_msg(body=b"x" * 500) for _ in range(10)])
    assert store.is_in_memory(0)
    store.in_memory_window = 100
    assert not store.is_in_memory(0) and store.is_in_memory(store.max_phy_offset - 50)


def test_topic_queue_ids(open_store):
    store = open_store()
    for topic, queue_id in [("A", 3), ("A", 0), ("B", 1)]:
        put_all(store, [make_msg(topic=topic, queue_id=queue_id)])
    assert store.topic_queue_ids() == {"A": [0, 3], "B": [1]}


# ------------------------------------------------------------------ special records


def test_prepared_transaction_records_are_not_dispatched(open_store):
    store = open_store()
    put_all(store, [make_msg()])
    half = make_msg()
    half.sys_flag = SysFlag.TRANSACTION_PREPARED_TYPE
    result = store.put_message(half)
    assert result.status is PutStatus.PUT_OK and result.queue_offset == 0
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1
    stored, _ = decode_record(store.look_message_by_offset(result.wrote_offset))
    assert stored.queue_offset == 0 and SysFlag.transaction_type(stored.sys_flag) == SysFlag.TRANSACTION_PREPARED_TYPE
    commit = make_msg()
    commit.sys_flag = SysFlag.TRANSACTION_COMMIT_TYPE
    assert store.put_message(commit).queue_offset == 1


def test_schedule_topic_tags_code_is_delivery_time(open_store):
    store = open_store()
    store.commit_log.clock = lambda: 1_000_000
    delayed = make_msg(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, DELAY="3")  # level 3 = 10 s
    capped = make_msg(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, DELAY="99")  # capped to level 18 = 2 h
    put_all(store, [delayed, capped])
    cq = store.queues.get("SCHEDULE_TOPIC_XXXX", 2)
    assert cq.entry(0)[2] == 1_000_000 + 10_000
    assert cq.entry(1)[2] == 1_000_000 + 7_200_000


# ------------------------------------------------------------------ flushing and lifecycle


def test_sync_flush(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH")
    result = store.put_message(make_msg())
    assert result.status is PutStatus.PUT_OK
    assert store.commit_log.flushed_offset >= result.wrote_offset + result.wrote_bytes
    no_wait = store.put_message(make_msg(WAIT="false"))
    assert no_wait.status is PutStatus.PUT_OK
    assert store.flush_commit_log() == store.max_phy_offset


def test_sync_flush_timeout_is_reported_but_the_message_is_stored(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=0)
    result = store.put_message(make_msg())
    assert result.status is PutStatus.FLUSH_DISK_TIMEOUT and result.ok
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1


def test_after_shutdown(open_store):
    store = open_store()
    put_all(store, [make_msg()])
    store.flush()
    store.shutdown()
    result = store.put_message(make_msg())
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreNotRunningError):
        store.get_messages("g", "TopicTest", 0, 0, 32)
    store.shutdown()  # idempotent


def test_put_sets_store_fields_on_the_message(open_store):
    store = open_store()
    m = MessageExt("TopicTest", b"abc", queue_id=0, born_host=("::1", 1))
    put_all(store, [m])
    assert m.store_host == STORE_HOST
    assert m.sys_flag & SysFlag.BORNHOST_V6 and not m.sys_flag & SysFlag.STOREHOST_V6
    assert m.msg_id == offset_msg_id(*STORE_HOST, m.commit_log_offset)


def test_failed_write_is_undone(open_store, monkeypatch):
    store = open_store()
    put_all(store, [make_msg(queue_id=0)])
    end = store.max_phy_offset
    real_append = ConsumeQueue.append

    def disk_full(self, *args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ConsumeQueue, "append", disk_full)
    failed = store.put_message(make_msg(queue_id=0))
    assert failed.status is PutStatus.SERVICE_NOT_AVAILABLE and "No space" in failed.remark
    assert "the broker's disk is full" in failed.remark
    assert store.max_phy_offset == end
    assert store.look_message_by_offset(end) is None

    monkeypatch.setattr(ConsumeQueue, "append", real_append)
    assert store.put_message(make_msg(queue_id=0)).status is PutStatus.SERVICE_NOT_AVAILABLE  # marked full
    store.clean()  # the retention run finds the disk has room: writable again
    ok = store.put_message(make_msg(queue_id=0, body=b"second"))
    assert (ok.wrote_offset, ok.queue_offset) == (end, 1)
    assert [m.body for m in decode_records(b"".join(pull_all(store, "TopicTest", 0)))] == [b"hello", b"second"]
