"""put_group: several puts (messages and batches, any queues) written together, each with the
result it would get alone; what the broker does with the sends of one read."""

import pytest
from store_helpers import SMALL_COMMIT_LOG, make_msg

from ferrymq.common.message import decode_records
from ferrymq.store import GetStatus, PutStatus
from ferrymq.store.consume_queue import ConsumeQueue
from ferrymq.store.index_file import IndexFile


def bodies(store, topic, queue_id):
    out, offset = [], 0
    while (got := store.get_messages("g", topic, queue_id, offset, 32)).status is GetStatus.FOUND:
        out += [m.body for m in decode_records(b"".join(got.records))]
        offset = got.next_begin_offset
    return out


def keyed(topic, queue_id, body, key):
    return make_msg(topic, queue_id, body, KEYS=key, UNIQ_KEY=f"U-{key}")


def test_puts_to_several_queues_get_the_offsets_they_would_get_one_by_one(open_store):
    store = open_store()
    assert store.put_message(make_msg("A", 0, b"before")).queue_offset == 0
    group = [make_msg("A", 0, b"a1"), make_msg("B", 3, b"b1"), [make_msg("A", 0, b"a2"), make_msg("A", 0, b"a3")],
             make_msg("A", 0, b"a4"), make_msg("B", 3, b"b2")]
    results = store.put_group(group)
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 5
    assert [(r.queue_offset, r.msg_num) for r in results] == [(1, 1), (0, 1), (2, 2), (4, 1), (1, 1)]
    # back to back in the CommitLog, in the order given
    ends = [r.wrote_offset + r.wrote_bytes for r in results]
    assert [r.wrote_offset for r in results[1:]] == ends[:-1]
    assert bodies(store, "A", 0) == [b"before", b"a1", b"a2", b"a3", b"a4"]
    assert bodies(store, "B", 3) == [b"b1", b"b2"]
    assert group[2][1].queue_offset == 3 and group[4].queue_offset == 1  # the messages learn their offsets
    # and a put after the group continues each queue
    assert store.put_message(make_msg("B", 3, b"b3")).queue_offset == 2


def test_every_key_of_a_group_is_queryable(open_store):
    store = open_store()
    store.put_group([keyed("A", 0, b"x", "k1"), keyed("B", 1, b"y", "k2"), [keyed("A", 0, b"z", "k3")]])
    for topic, key, body in (("A", "k1", b"x"), ("B", "k2", b"y"), ("A", "k3", b"z"), ("A", "U-k3", b"z")):
        found = store.query_message(topic, key, 10, 0, 2**62)
        assert [m.body for m in decode_records(b"".join(found.records))] == [body], key


def test_a_refused_put_holds_up_no_other(open_store):
    store = open_store(max_message_size=16)
    results = store.put_group([make_msg(body=b"ok-1"), make_msg(body=b"x" * 17), [], make_msg(body=b"ok-2"),
                               [make_msg(queue_id=0), make_msg(queue_id=1)]])
    assert [r.status for r in results] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.MESSAGE_ILLEGAL,
                                           PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
    assert "maxMessageSize" in results[1].remark and "same topic and queue" in results[4].remark
    assert [r.queue_offset for r in (results[0], results[3])] == [0, 1]
    assert bodies(store, "TopicTest", 0) == [b"ok-1", b"ok-2"]


def test_all_or_nothing_one_refused_put_refuses_the_group_and_stores_none(open_store):
    """A batch whose messages go to several queues (docs/timers.md#batches): one part refused,
    none stored, every part told why."""
    store = open_store(max_message_size=16)
    results = store.put_group([[make_msg(body=b"ok-1"), make_msg(body=b"ok-2")], make_msg("B", 0, b"x" * 17)],
                              all_or_nothing=True)
    assert [r.status for r in results] == [PutStatus.MESSAGE_ILLEGAL] * 2
    assert all("maxMessageSize" in r.remark for r in results)
    assert bodies(store, "TopicTest", 0) == [] and bodies(store, "B", 0) == []
    stored = store.put_group([[make_msg(body=b"ok-1")], make_msg("B", 0, b"ok-2")], all_or_nothing=True)
    assert [(r.status, r.queue_offset) for r in stored] == [(PutStatus.PUT_OK, 0)] * 2


def test_a_group_larger_than_what_is_left_of_a_segment_continues_in_the_next(open_store):
    store = open_store()
    body = b"b" * 1000
    store.put_message(make_msg(body=b"f" * (SMALL_COMMIT_LOG - 3000)))  # leaves room for about two of them
    results = store.put_group([make_msg(queue_id=i % 2, body=body) for i in range(6)])
    assert all(r.status is PutStatus.PUT_OK for r in results)
    segments = {r.wrote_offset // SMALL_COMMIT_LOG for r in results}
    assert segments == {0, 1}
    assert [r.queue_offset for r in results] == [1, 0, 2, 1, 3, 2]
    assert bodies(store, "TopicTest", 0)[1:] == [body] * 3 and bodies(store, "TopicTest", 1) == [body] * 3


def test_a_failed_write_fails_its_puts_and_the_later_ones_and_leaves_nothing_of_them(open_store, monkeypatch):
    store = open_store()
    store.put_message(make_msg("TopicTest", 0, b"kept"))
    store.put_message(make_msg(body=b"f" * (SMALL_COMMIT_LOG - 3000)))
    end = store.max_phy_offset
    real_put = IndexFile.put
    calls = []

    def full_on_second_write(self, postings, ts):
        calls.append(len(postings))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_put(self, postings, ts)

    monkeypatch.setattr(IndexFile, "put", full_on_second_write)
    body = b"b" * 1000
    results = store.put_group([keyed("TopicTest", i % 2, body, f"k{i}") for i in range(6)])
    written = [r for r in results if r.status is PutStatus.PUT_OK]
    failed = results[len(written):]
    assert len(written) == 2 and all(r.wrote_offset < SMALL_COMMIT_LOG for r in written)  # the first segment's run
    assert failed and all(r.status is PutStatus.SERVICE_NOT_AVAILABLE and "No space" in r.remark for r in failed)
    assert store.max_phy_offset >= written[-1].wrote_offset + written[-1].wrote_bytes > end
    # nothing of the failed run: no queue entries, no keys, and the queues go on from the written ones
    assert store.get_max_offset_in_queue("TopicTest", 0) == 3 and store.get_max_offset_in_queue("TopicTest", 1) == 1
    assert not store.query_message("TopicTest", "k3", 10, 0, 2**62).records
    monkeypatch.setattr(IndexFile, "put", real_put)
    store.clean()  # the disk has room again
    again = store.put_group([make_msg(queue_id=1, body=b"after")])
    assert again[0].status is PutStatus.PUT_OK and again[0].queue_offset == 1
    assert bodies(store, "TopicTest", 1) == [body, b"after"]


def test_a_queue_write_that_fails_takes_back_the_entries_of_the_queues_written_before_it(open_store, monkeypatch):
    store = open_store()
    real_append = ConsumeQueue.append

    def second_queue_full(self, queue_offset, entries, phys_end):
        if self.queue_id == 1:
            raise OSError(28, "No space left on device")
        return real_append(self, queue_offset, entries, phys_end)

    monkeypatch.setattr(ConsumeQueue, "append", second_queue_full)
    results = store.put_group([make_msg(queue_id=0), make_msg(queue_id=1)])
    assert all(r.status is PutStatus.SERVICE_NOT_AVAILABLE for r in results)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0 and store.max_phy_offset == 0
    monkeypatch.setattr(ConsumeQueue, "append", real_append)
    store.clean()
    assert [r.queue_offset for r in store.put_group([make_msg(queue_id=0), make_msg(queue_id=1)])] == [0, 0]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_group_survives_a_restart(open_store, tmp_path, flush):
    store = open_store(flush_disk_type=flush)
    store.put_group([make_msg(queue_id=q, body=f"m{i}".encode()) for i, q in enumerate([0, 1, 0, 2, 1])])
    store.shutdown()
    again = open_store(tmp_path / "store", flush_disk_type=flush)
    assert bodies(again, "TopicTest", 0) == [b"m0", b"m2"] and bodies(again, "TopicTest", 1) == [b"m1", b"m4"]
    assert again.put_message(make_msg(queue_id=2)).queue_offset == 1
