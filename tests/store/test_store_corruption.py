"""Abnormal recovery (docs/wire-format.md#checkpoint, #abort-marker-and-lock): damaged CommitLog data is found record by record,
cut off at the exact offset, logged with it, and everything before it is served."""

import logging
import os
import shutil

import pytest
from store_helpers import SMALL_COMMIT_LOG, make_msg

from ferrymq.common.message import decode_records
from ferrymq.store import GetStatus, PutStatus
from ferrymq.store.checkpoint import read_checkpoint


def fill(store, count, queues=2, body=b"b" * 600):
    msgs = [make_msg(queue_id=i % queues, body=body + b"%d" % i, UNIQ_KEY=f"U{i}") for i in range(count)]
    for m in msgs:
        assert store.put_message(m).status is PutStatus.PUT_OK
    return msgs


def pull_all(store, queue_id):
    out, offset = [], store.get_min_offset_in_queue("TopicTest", queue_id)
    while (r := store.get_messages("g", "TopicTest", queue_id, offset, 32)).status is GetStatus.FOUND:
        out += decode_records(b"".join(r.records), check_crc=True)
        offset = r.next_begin_offset
    return out


def crash_copy(tmp_path):
    target = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", target)
    assert (target / "abort").exists()
    return target


def segment_of(root, offset):
    return root / "commitlog" / f"{offset - offset % SMALL_COMMIT_LOG:020d}"


def assert_served_up_to(store, msgs, victim):
    """Everything stored before ``victim`` is there, byte-identical; nothing from it on."""
    kept = [m for m in msgs if m.commit_log_offset < victim.commit_log_offset]
    for queue_id in (0, 1):
        assert pull_all(store, queue_id) == [m for m in kept if m.queue_id == queue_id]
        assert store.get_max_offset_in_queue("TopicTest", queue_id) == sum(1 for m in kept if m.queue_id == queue_id)
    assert store.max_phy_offset == victim.commit_log_offset
    assert store.query_message("TopicTest", victim.properties["UNIQ_KEY"], 32, 0, 2**62).records == []
    before = kept[-1]
    assert len(store.query_message("TopicTest", before.properties["UNIQ_KEY"], 32, 0, 2**62).records) == 1


@pytest.mark.parametrize(("where", "problem"), [
    ("magic", "bad magic code"),
    ("total size", "record fields do not add up to its total size"),
    ("body", "body CRC mismatch"),
])
def test_a_flipped_byte_is_found_cut_at_its_record_and_logged(open_store, tmp_path, caplog, where, problem):
    store = open_store()
    msgs = fill(store, 160)  # several CommitLog files
    target = crash_copy(tmp_path)
    victim = msgs[130]
    at = {"magic": 5, "total size": 2, "body": victim.store_size // 2}[where]
    path = segment_of(target, victim.commit_log_offset)
    with open(path, "r+b") as f:
        f.seek(victim.commit_log_offset % SMALL_COMMIT_LOG + at)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x20]))

    with caplog.at_level(logging.WARNING):
        crashed = open_store(target)
    report = crashed.last_recovery
    assert report.end == victim.commit_log_offset
    assert report.problem.startswith(problem)
    assert f"invalid data at offset {victim.commit_log_offset} ({report.problem})" in caplog.text
    assert f"truncating the CommitLog at {victim.commit_log_offset}" in caplog.text
    assert_served_up_to(crashed, msgs, victim)
    # The broker goes on from there: the next message takes the freed offsets.
    nxt = crashed.put_message(make_msg(queue_id=victim.queue_id))
    assert (nxt.wrote_offset, nxt.queue_offset) == (victim.commit_log_offset, victim.queue_offset)


def test_a_body_flip_is_reported_as_a_crc_mismatch(open_store, tmp_path, caplog):
    store = open_store()
    msgs = fill(store, 20)
    target = crash_copy(tmp_path)
    victim = msgs[11]
    with open(segment_of(target, victim.commit_log_offset), "r+b") as f:
        f.seek(victim.commit_log_offset + 200)  # inside the 600-byte body
        f.write(b"!")
    with caplog.at_level(logging.WARNING):
        crashed = open_store(target)
    assert crashed.last_recovery.problem == "body CRC mismatch"
    assert f"invalid data at offset {victim.commit_log_offset} (body CRC mismatch)" in caplog.text
    assert_served_up_to(crashed, msgs, victim)


def test_a_segment_file_cut_mid_record(open_store, tmp_path, caplog):
    store = open_store()
    msgs = fill(store, 160)
    target = crash_copy(tmp_path)
    last_file = sorted((target / "commitlog").iterdir())[-1]
    victim = next(m for m in msgs if m.commit_log_offset >= int(last_file.name) + 5000)
    cut = victim.commit_log_offset % SMALL_COMMIT_LOG + 100  # 100 bytes of the record made it
    os.truncate(last_file, cut)

    with caplog.at_level(logging.WARNING):
        crashed = open_store(target)
    assert f"is {cut} bytes, expected {SMALL_COMMIT_LOG}" in caplog.text  # noticed and extended
    assert crashed.last_recovery.end == victim.commit_log_offset
    assert "incomplete record" in crashed.last_recovery.problem
    assert f"invalid data at offset {victim.commit_log_offset}" in caplog.text
    assert os.path.getsize(last_file) == SMALL_COMMIT_LOG
    assert_served_up_to(crashed, msgs, victim)


def test_a_torn_tail_leaves_zeros_and_consume_queue_entries_past_it_go(open_store, tmp_path, caplog):
    store = open_store()
    msgs = fill(store, 30)
    target = crash_copy(tmp_path)
    victim = msgs[-3]
    with open(segment_of(target, victim.commit_log_offset), "r+b") as f:
        f.seek(victim.commit_log_offset % SMALL_COMMIT_LOG + 50)
        f.write(bytes(SMALL_COMMIT_LOG - victim.commit_log_offset % SMALL_COMMIT_LOG - 50))  # the rest never reached the disk
    # The ConsumeQueues did get their entries for the three lost records.
    assert store.get_max_offset_in_queue("TopicTest", 0) + store.get_max_offset_in_queue("TopicTest", 1) == 30

    with caplog.at_level(logging.WARNING):
        crashed = open_store(target)
    assert_served_up_to(crashed, msgs, victim)
    assert "dropping 50 bytes" in caplog.text


def test_recovery_starts_at_the_checkpoint(open_store, tmp_path):
    """Files older than the checkpoint are trusted (not re-read); from it on, every record is checked."""
    store = open_store(flush_consume_queue_thorough_interval=0)
    store.commit_log.clock = iter(range(1_700_000_000_000, 1_700_000_000_000 + 10**9, 1000)).__next__  # 1 s apart
    msgs = fill(store, 160)
    store.flush_commit_log()
    store.flush_consume_queues()
    cp = read_checkpoint(tmp_path / "store" / "checkpoint")
    assert cp["physicMsgTimestamp"] == msgs[-1].store_timestamp
    assert cp["logicsMsgTimestamp"] == msgs[-1].store_timestamp
    assert cp["indexMsgTimestamp"] == msgs[-1].store_timestamp
    assert cp["physicFlushedOffset"] == store.max_phy_offset
    target = crash_copy(tmp_path)

    crashed = open_store(target)
    segments = crashed.commit_log.segments
    # The checkpoint is 3 s behind the last record's time: the last file starts earlier than that.
    assert crashed.last_recovery.walked_from == segments[-1].start_offset
    assert crashed.last_recovery.records_checked == sum(1 for m in msgs if m.commit_log_offset >= segments[-1].start_offset)


def test_without_a_checkpoint_every_file_is_checked(open_store, tmp_path):
    store = open_store()
    msgs = fill(store, 160)
    target = crash_copy(tmp_path)
    os.unlink(target / "checkpoint")
    crashed = open_store(target)
    assert crashed.last_recovery.walked_from == 0
    assert crashed.last_recovery.records_checked == len(msgs)


def test_consume_queues_missing_older_entries_are_rebuilt_whole(open_store, tmp_path, caplog):
    store = open_store(flush_consume_queue_thorough_interval=0)
    store.commit_log.clock = iter(range(1_700_000_000_000, 1_700_000_000_000 + 10**9, 1000)).__next__
    msgs = fill(store, 160)
    store.flush()
    target = crash_copy(tmp_path)
    shutil.rmtree(target / "consumequeue" / "TopicTest" / "1")  # a lost directory, far older than the checkpoint
    with caplog.at_level(logging.WARNING):
        crashed = open_store(target)
    assert "rebuilding every ConsumeQueue" in caplog.text
    assert pull_all(crashed, 1) == [m for m in msgs if m.queue_id == 1]
    assert pull_all(crashed, 0) == [m for m in msgs if m.queue_id == 0]


def test_clean_exit_after_a_crash_recovery_needs_no_recovery(open_store, tmp_path, caplog):
    store = open_store()
    fill(store, 50)
    target = crash_copy(tmp_path)
    crashed = open_store(target)
    assert not crashed.last_exit_clean
    crashed.shutdown()
    assert not (target / "abort").exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = open_store(target)
    assert again.last_exit_clean and "not shut down cleanly" not in caplog.text


def test_a_lost_consume_queue_is_rebuilt_whole_even_with_a_fresh_checkpoint(open_store, tmp_path, caplog):
    store = open_store(mapped_file_size_commit_log=1024 * 1024, flush_consume_queue_thorough_interval=0)
    store.commit_log.clock = iter(range(1_700_000_000_000, 1_700_000_000_000 + 10**9, 1000)).__next__  # 1 s apart
    msgs = fill(store, 200)  # one CommitLog file: recovery walks from its start
    store.flush()  # the checkpoint says every ConsumeQueue entry is on disk
    target = crash_copy(tmp_path)
    shutil.rmtree(target / "consumequeue")
    with caplog.at_level(logging.WARNING):
        crashed = open_store(target, mapped_file_size_commit_log=1024 * 1024)
    assert "rebuilding every ConsumeQueue" in caplog.text
    for queue_id in (0, 1):
        assert pull_all(crashed, queue_id) == [m for m in msgs if m.queue_id == queue_id]
