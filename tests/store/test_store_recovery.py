import os
import shutil

import pytest
from store_helpers import SMALL_COMMIT_LOG, make_msg

from ferrymq.common.message import decode_record, encode_record
from ferrymq.store import GetStatus, PutStatus
from ferrymq.store.dir_lock import StoreLockedError


def fill(store, count, queues=3, body=b"x" * 700):
    msgs = [make_msg(queue_id=i % queues, body=body, KEYS=f"k{i}") for i in range(count)]
    for m in msgs:
        assert store.put_message(m).status is PutStatus.PUT_OK
    return msgs


def snapshot(store, queues=3):
    """Everything a consumer can see: per queue (min, max, all records)."""
    out = {}
    for queue_id in range(queues):
        records, offset = [], store.get_min_offset_in_queue("TopicTest", queue_id)
        while (r := store.get_messages("g", "TopicTest", queue_id, offset, 32)).status is GetStatus.FOUND:
            records += r.records
            offset = r.next_begin_offset
        out[queue_id] = (
            store.get_min_offset_in_queue("TopicTest", queue_id),
            store.get_max_offset_in_queue("TopicTest", queue_id),
            records,
        )
    return out


def crash_copy(tmp_path, name="crashed"):
    """The directory as a kill -9 would leave it: everything written, no clean shutdown."""
    target = tmp_path / name
    shutil.copytree(tmp_path / "store", target)
    assert (target / "abort").exists()
    return target


def test_clean_restart(open_store, tmp_path):
    store = open_store()
    fill(store, 200)  # several CommitLog files
    before, max_phy = snapshot(store), store.max_phy_offset
    assert len(os.listdir(tmp_path / "store" / "commitlog")) > 1
    assert (tmp_path / "store" / "abort").exists()
    store.shutdown()
    assert not (tmp_path / "store" / "abort").exists()

    reopened = open_store()
    assert snapshot(reopened) == before
    assert reopened.max_phy_offset == max_phy
    m = make_msg(queue_id=1)
    result = reopened.put_message(m)
    assert result.queue_offset == before[1][1]
    assert result.wrote_offset == max_phy or result.wrote_offset % SMALL_COMMIT_LOG == 0  # continues, or rolls
    assert decode_record(reopened.look_message_by_offset(result.wrote_offset))[0] == m


def fill_until_roll(store):
    """Put until a record lands first in the second CommitLog file, then shut down."""
    results = []
    while not results or results[-1].wrote_offset != SMALL_COMMIT_LOG:
        results.append(store.put_message(make_msg(body=b"y" * 900)))
    store.shutdown()
    return results


def test_restart_right_after_a_roll(open_store, tmp_path):
    results = fill_until_roll(open_store())

    reopened = open_store()
    assert reopened.max_phy_offset == SMALL_COMMIT_LOG + results[-1].wrote_bytes
    nxt = reopened.put_message(make_msg(body=b"y" * 900))
    assert nxt.wrote_offset == SMALL_COMMIT_LOG + results[-1].wrote_bytes
    assert nxt.queue_offset == len(results)
    assert sorted(os.listdir(tmp_path / "store" / "commitlog")) == ["00000000000000000000", f"{SMALL_COMMIT_LOG:020d}"]


def test_restart_when_the_newest_file_was_lost(open_store, tmp_path):
    results = fill_until_roll(open_store())
    os.unlink(tmp_path / "store" / "commitlog" / f"{SMALL_COMMIT_LOG:020d}")  # only the blank-ended file is left

    reopened = open_store()
    blank_at = results[-2].wrote_offset + results[-2].wrote_bytes
    assert reopened.max_phy_offset == blank_at
    assert reopened.get_max_offset_in_queue("TopicTest", 0) == len(results) - 1  # its index entry went too
    again = reopened.put_message(make_msg(body=b"y" * 900))
    assert (again.wrote_offset, again.queue_offset) == (SMALL_COMMIT_LOG, len(results) - 1)


def test_crash_keeps_everything_written(open_store, tmp_path):
    store = open_store()
    fill(store, 150)
    before = snapshot(store)
    crashed = open_store(crash_copy(tmp_path))
    assert snapshot(crashed) == before
    assert crashed.max_phy_offset == store.max_phy_offset


def test_crash_with_a_torn_last_record(open_store, tmp_path):
    store = open_store()
    msgs = fill(store, 20)
    end = store.max_phy_offset
    target = crash_copy(tmp_path)
    last_file = sorted((target / "commitlog").iterdir())[-1]
    torn = encode_record(make_msg(body=b"z" * 500))[:300]  # a write cut short
    with open(last_file, "r+b") as f:
        f.seek(end % SMALL_COMMIT_LOG)
        f.write(torn)

    crashed = open_store(target)
    assert crashed.max_phy_offset == end
    with open(last_file, "rb") as f:
        f.seek(end % SMALL_COMMIT_LOG)
        assert f.read(300) == bytes(300)  # zeroed
    nxt = crashed.put_message(make_msg(queue_id=2))
    assert nxt.wrote_offset == end and nxt.queue_offset == sum(1 for m in msgs if m.queue_id == 2)


def test_crash_with_a_corrupt_last_record_drops_it_and_its_index_entry(open_store, tmp_path):
    store = open_store()
    msgs = fill(store, 20)
    target = crash_copy(tmp_path)
    last = msgs[-1]
    last_file = sorted((target / "commitlog").iterdir())[-1]
    with open(last_file, "r+b") as f:
        f.seek(last.commit_log_offset % SMALL_COMMIT_LOG + last.store_size - 200)  # inside the body
        f.write(b"!")

    crashed = open_store(target)
    assert crashed.max_phy_offset == last.commit_log_offset
    assert crashed.get_max_offset_in_queue("TopicTest", last.queue_id) == last.queue_offset


def test_clean_restart_does_not_pay_for_crc_checks(open_store, tmp_path):
    store = open_store()
    msgs = fill(store, 5)
    store.shutdown()
    with open(tmp_path / "store" / "commitlog" / "00000000000000000000", "r+b") as f:
        f.seek(msgs[-1].commit_log_offset + msgs[-1].store_size - 200)
        f.write(b"!")
    assert open_store().max_phy_offset == msgs[-1].commit_log_offset + msgs[-1].store_size


def test_records_missing_from_the_consume_queue_are_indexed_on_load(open_store, tmp_path):
    store = open_store()
    fill(store, 30)
    assert store.put_messages([make_msg(queue_id=2) for _ in range(4)]).queue_offset == 10
    before = snapshot(store)
    target = crash_copy(tmp_path)
    cq_file = target / "consumequeue" / "TopicTest" / "2" / "00000000000000000000"
    data = bytearray(cq_file.read_bytes())
    data[10 * 20 : 14 * 20] = bytes(80)  # the crash hit between the CommitLog write and the index write
    cq_file.write_bytes(bytes(data))

    crashed = open_store(target)
    assert snapshot(crashed) == before
    assert cq_file.read_bytes() == (tmp_path / "store" / "consumequeue" / "TopicTest" / "2" / "00000000000000000000").read_bytes()


def test_consume_queues_are_rebuilt_when_missing(open_store, tmp_path):
    store = open_store()
    fill(store, 250)
    before = snapshot(store)
    store.shutdown()
    shutil.rmtree(tmp_path / "store" / "consumequeue")
    assert snapshot(open_store()) == before


def test_offset_too_small_once_the_oldest_file_is_gone(open_store, tmp_path):
    store = open_store()
    fill(store, 200, queues=1)
    max_offset = store.get_max_offset_in_queue("TopicTest", 0)
    store.shutdown()
    os.unlink(tmp_path / "store" / "commitlog" / "00000000000000000000")  # as retention would

    reopened = open_store()
    assert reopened.min_phy_offset == SMALL_COMMIT_LOG
    min_offset = reopened.get_min_offset_in_queue("TopicTest", 0)
    assert 0 < min_offset < max_offset
    first = reopened.get_commit_log_offset_in_queue("TopicTest", 0, min_offset)
    assert first == SMALL_COMMIT_LOG
    small = reopened.get_messages("g", "TopicTest", 0, 0, 32)
    assert (small.status, small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, min_offset)
    badly = reopened.get_messages("g", "TopicTest", 0, max_offset + 5, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, max_offset)
    assert reopened.get_messages("g", "TopicTest", 0, min_offset, 32).status is GetStatus.FOUND


def test_one_store_per_directory(open_store, tmp_path):
    store = open_store()
    with pytest.raises(StoreLockedError, match="Lock failed,MQ already started"):
        open_store()
    store.shutdown()
    assert (tmp_path / "store" / "lock").read_bytes() == b"lock"
    open_store()  # free again


def test_a_failed_load_keeps_the_unclean_marker(open_store, tmp_path):
    store = open_store()
    fill(store, 5)
    target = crash_copy(tmp_path)
    with pytest.raises(ValueError, match="expected"):
        open_store(target, mapped_file_size_commit_log=32 * 1024)  # wrong size setting
    assert (target / "abort").exists()
    assert open_store(target).get_max_offset_in_queue("TopicTest", 1) == 2


def test_a_clean_restart_starts_at_the_last_consume_queue_entry(open_store, tmp_path):
    from ferrymq.common.message import SysFlag
    store = open_store()
    fill(store, 30)
    prepared = make_msg(queue_id=1)
    prepared.sys_flag = SysFlag.TRANSACTION_PREPARED_TYPE  # stored, but in no ConsumeQueue
    store.put_message(prepared)
    end = store.max_phy_offset
    store.shutdown()
    reopened = open_store()
    assert reopened.last_recovery.records_checked == 1  # only the record after the last entry
    assert reopened.max_phy_offset == end
    assert reopened.last_recovery.last_store_timestamp == prepared.store_timestamp


def test_a_clean_restart_does_not_trust_an_entry_whose_record_is_gone(open_store, tmp_path):
    store = open_store()
    msgs = fill(store, 30)
    store.shutdown()
    last = msgs[-1]
    with open(tmp_path / "store" / "commitlog" / f"{last.commit_log_offset - last.commit_log_offset % SMALL_COMMIT_LOG:020d}", "r+b") as f:
        f.seek(last.commit_log_offset % SMALL_COMMIT_LOG)
        f.write(bytes(last.store_size))  # lost after a "clean" exit (a restored backup, a bad disk)
    reopened = open_store()
    assert reopened.max_phy_offset == last.commit_log_offset
    assert reopened.get_max_offset_in_queue("TopicTest", last.queue_id) == last.queue_offset
