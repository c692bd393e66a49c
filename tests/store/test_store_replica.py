"""A slave's CommitLog built from a master's bytes (store/replica.py): chunks that split
records anywhere, files that roll with a blank tail, a restart in the middle, and data
that cannot continue the log. The copy must be byte-identical and serve the same pulls
and key queries as the master (its ConsumeQueues and IndexFiles built by the same
dispatch as recovery)."""

from __future__ import annotations

import random

import pytest
from store_helpers import make_msg

from ferrymq.common.message import BLANK_MAGIC
from ferrymq.store.replica import ReplicaDataError, read_for_transfer

TOPICS = [("TopicA", 4), ("TopicB", 2)]


def fill(store, count: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    sent = []
    for i in range(count):
        topic, queues = rng.choice(TOPICS)
        msg = make_msg(topic, queue_id=rng.randrange(queues), body=bytes([i % 251]) * rng.randint(1, 3000),
                       KEYS=f"key-{i}")
        assert store.put_message(msg).ok
        sent.append(msg)
    return sent


def copy(master, slave_store, appender, upto: int | None = None, seed: int = 2, defer_dispatch: bool = False) -> None:
    """Feed the master's bytes to the slave in random chunk sizes, as transfers would."""
    rng = random.Random(seed)
    end = master.commit_log.max_offset if upto is None else upto
    offset = appender.expected_offset if slave_store.commit_log.max_offset else master.commit_log.min_offset
    while offset < end:
        data = read_for_transfer(master.commit_log, offset, min(rng.randint(1, 9000), end - offset))
        assert data, f"no master data at {offset}"
        appender.append(offset, data, defer_dispatch=defer_dispatch)
        offset += len(data)


def commit_log_bytes(store) -> bytes:
    cl = store.commit_log
    out, offset = bytearray(), cl.min_offset
    while offset < cl.max_offset:
        chunk = read_for_transfer(cl, offset, 1 << 20)
        out += chunk
        offset += len(chunk)
    return bytes(out)


def assert_same_queues(master, slave) -> None:
    for topic, queues in TOPICS:
        for q in range(queues):
            assert slave.get_max_offset_in_queue(topic, q) == master.get_max_offset_in_queue(topic, q)
            want = master.get_messages("g", topic, q, 0, 10_000)
            got = slave.get_messages("g", topic, q, 0, 10_000)
            assert got.records == want.records and got.next_begin_offset == want.next_begin_offset


def test_copy_in_random_chunks_is_byte_identical_and_serves_the_same_pulls_and_queries(open_store, tmp_path):
    master = open_store(tmp_path / "master")
    fill(master, 400)
    assert len(master.commit_log.segments) > 3  # files rolled: blank tails were copied too
    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    copy(master, slave, appender)
    assert slave.commit_log.max_offset == master.commit_log.max_offset
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    assert_same_queues(master, slave)
    found = slave.query_message("TopicA", "key-7", 32, 0, 2**62).records or slave.query_message(
        "TopicB", "key-7", 32, 0, 2**62).records
    assert len(found) == 1


def test_a_deferred_copy_is_confirmed_before_it_is_indexed_and_a_failed_index_write_is_retried(
        open_store, tmp_path, monkeypatch):
    # A slave keeping up confirms a transfer first and indexes it right after; an index write that
    # fails then (a full or failing disk) must not take back what it already confirmed.
    master = open_store(tmp_path / "master")
    fill(master, 300)
    slave = open_store(tmp_path / "slave")
    copy(master, slave, slave.replica_appender(), defer_dispatch=True)
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    assert slave.dispatch_backlog > 0
    assert all(slave.get_max_offset_in_queue(t, q) == 0 for t, n in TOPICS for q in range(n))

    real = slave.dispatcher.appended_run
    calls = []

    def failing_once(run, store_ts):
        calls.append(len(run))
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        real(run, store_ts)

    monkeypatch.setattr(slave.dispatcher, "appended_run", failing_once)
    assert slave.dispatch_pending() is False
    assert commit_log_bytes(slave) == commit_log_bytes(master)  # nothing confirmed was taken back
    assert slave.dispatch_pending() is True and slave.dispatch_backlog == 0
    assert_same_queues(master, slave)


def test_a_slave_restarted_mid_record_resumes_from_its_last_whole_record(open_store, tmp_path):
    master = open_store(tmp_path / "master")
    fill(master, 300)
    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    cut = master.commit_log.max_offset // 2 + 17  # almost surely inside a record
    copy(master, slave, appender, upto=cut)
    assert appender.pending_bytes > 0 and slave.commit_log.max_offset < cut
    slave.shutdown()  # what was not whole is lost with the process

    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    start = appender.reset()
    assert start == slave.commit_log.max_offset < cut
    copy(master, slave, appender)
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    assert_same_queues(master, slave)


def test_a_new_slave_starts_at_the_masters_last_file(open_store, tmp_path):
    master = open_store(tmp_path / "master")
    fill(master, 300)
    last_file = master.commit_log.segments[-1].start_offset
    assert last_file > 0
    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    offset = last_file
    while offset < master.commit_log.max_offset:
        data = read_for_transfer(master.commit_log, offset, 32 * 1024)
        appender.append(offset, data)
        offset += len(data)
    assert slave.commit_log.min_offset == last_file
    assert slave.commit_log.max_offset == master.commit_log.max_offset
    assert commit_log_bytes(slave) == commit_log_bytes(master)[last_file:]
    # Queues start where the copied file does (a queue with nothing in it has no entries);
    # their newest entries equal the master's.
    copied = 0
    for topic, queues in TOPICS:
        for q in range(queues):
            top = master.get_max_offset_in_queue(topic, q)
            if slave.get_max_offset_in_queue(topic, q) == 0:
                continue
            copied += 1
            assert slave.get_max_offset_in_queue(topic, q) == top
            assert (slave.get_messages("g", topic, q, top - 1, 1).records
                    == master.get_messages("g", topic, q, top - 1, 1).records)
    assert copied


def test_a_transfer_that_does_not_continue_the_log_is_refused(open_store, tmp_path):
    master = open_store(tmp_path / "master")
    fill(master, 50)
    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    data = read_for_transfer(master.commit_log, 0, 4096)
    appender.append(0, data)
    with pytest.raises(ReplicaDataError, match="expected"):
        appender.append(0, data)  # not where the slave's data ends
    with pytest.raises(ReplicaDataError, match="no record"):
        appender.append(appender.expected_offset, b"\x00" * 64 + bytes(appender.pending_bytes))
    appender.reset()
    assert appender.expected_offset == slave.commit_log.max_offset


@pytest.mark.parametrize("damage, error", [
    ("properties_length", "malformed record"),  # a whole record whose fields do not add up to its size
    ("size_past_the_file", "no record"),  # a record claiming more than its CommitLog file has left
    ("magic", "no record"),
])
def test_a_damaged_record_after_good_ones_is_refused_and_nothing_of_the_transfer_is_kept(
        open_store, tmp_path, damage, error):
    master = open_store(tmp_path / "master")
    fill(master, 20)
    slave = open_store(tmp_path / "slave")
    appender = slave.replica_appender()
    good = read_for_transfer(master.commit_log, 0, master.commit_log.max_offset)
    sizes, pos = [], 0
    while pos < len(good):
        sizes.append(int.from_bytes(good[pos:pos + 4], "big"))
        pos += sizes[-1]
    data = bytearray(good)
    third = sum(sizes[:2])  # the third record of the transfer
    if damage == "properties_length":
        end = third + sizes[2]  # the record's last field is its properties, after their 2-byte length
        for back in range(2, sizes[2]):
            if int.from_bytes(data[end - back - 2:end - back], "big") == back:
                data[end - back - 2:end - back] = (back - 1).to_bytes(2, "big")
                break
        else:
            pytest.fail("no properties length found in the record")
    elif damage == "size_past_the_file":
        data[third:third + 4] = (slave.commit_log.segment_size + 1).to_bytes(4, "big")
    else:
        data[third + 4:third + 8] = b"\x00\x00\x00\x00"
    with pytest.raises(ReplicaDataError, match=error):
        appender.append(0, bytes(data))
    assert slave.commit_log.max_offset == 0 and slave.get_max_offset_in_queue("TopicA", 0) == 0
    appender.reset()
    copy(master, slave, appender)  # the master's own bytes still go in afterwards
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    assert_same_queues(master, slave)


def test_a_blank_tail_of_another_file_size_is_refused(open_store, tmp_path):
    """A slave whose mappedFileSizeCommitLog differs from its master's cannot copy it."""
    master = open_store(tmp_path / "master")
    fill(master, 200)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=128 * 1024)
    appender = slave.replica_appender()
    with pytest.raises(ReplicaDataError, match="mappedFileSizeCommitLog"):
        copy(master, slave, appender)


def test_blank_records_are_where_the_master_put_them(open_store, tmp_path):
    master = open_store(tmp_path / "master")
    fill(master, 200)
    slave = open_store(tmp_path / "slave")
    copy(master, slave, slave.replica_appender())
    for seg in master.commit_log.segments[:-1]:
        end = seg.write_position
        tail = master.commit_log.get_data(seg.start_offset, seg.size)
        assert tail == slave.commit_log.get_data(seg.start_offset, seg.size)
        assert BLANK_MAGIC.to_bytes(4, "big", signed=True) in tail[-8000:] or end == seg.size


def test_a_slave_store_refuses_puts_with_rocketmqs_answer(open_store, tmp_path):
    slave = open_store(tmp_path / "slave")
    slave.refuse_puts = "the broker is a slave"
    result = slave.put_message(make_msg())
    assert result.status.name == "SERVICE_NOT_AVAILABLE"
    assert "messages are put to the slave" in result.remark and "the broker is a slave" in result.remark
