import os
import struct

from store_helpers import SMALL_COMMIT_LOG, make_msg

from ferrymq.common.message import BLANK_MAGIC, decode_records
from ferrymq.store import GetStatus, PutStatus
from ferrymq.store.consume_queue import CQ_ENTRY


def commit_log_files(tmp_path):
    return sorted(os.listdir(tmp_path / "store" / "commitlog"))


def pull_everything(store, queue_id=0):
    records, offset = [], 0
    while (result := store.get_messages("g", "TopicTest", queue_id, offset, 32)).status is GetStatus.FOUND:
        records += result.records
        offset = result.next_begin_offset
    return records


def test_commit_log_rolls_with_a_blank_record(open_store, tmp_path):
    store = open_store()
    msgs = [make_msg(body=b"x" * 1000) for _ in range(70)]
    for m in msgs:
        assert store.put_message(m).status is PutStatus.PUT_OK
    size = msgs[0].store_size
    fit = next(k for k in range(1000) if (k + 1) * size + 8 > SMALL_COMMIT_LOG)  # the (fit+1)th needs a new file
    assert commit_log_files(tmp_path) == ["00000000000000000000", f"{SMALL_COMMIT_LOG:020d}"]
    assert [m.commit_log_offset for m in msgs[:fit]] == [i * size for i in range(fit)]
    assert msgs[fit].commit_log_offset == SMALL_COMMIT_LOG  # first record of the new file at its start
    assert msgs[fit].queue_offset == fit  # queue offsets know nothing of files

    first_file = (tmp_path / "store" / "commitlog" / "00000000000000000000").read_bytes()
    assert len(first_file) == SMALL_COMMIT_LOG
    remaining = SMALL_COMMIT_LOG - fit * size
    assert first_file[fit * size : fit * size + 8] == struct.pack(">ii", remaining, BLANK_MAGIC)
    assert first_file[fit * size + 8 :] == bytes(remaining - 8)

    assert decode_records(b"".join(pull_everything(store))) == msgs


def test_a_batch_rolls_as_a_whole(open_store, tmp_path):
    store = open_store()
    assert store.put_message(make_msg(body=b"x" * 60000)).status is PutStatus.PUT_OK
    batch = [make_msg(body=b"y" * 2000) for _ in range(4)]
    result = store.put_messages(batch)
    assert result.wrote_offset == SMALL_COMMIT_LOG  # did not fit after the first record: all of it moved
    assert [m.commit_log_offset for m in batch] == [SMALL_COMMIT_LOG + i * batch[0].store_size for i in range(4)]
    assert commit_log_files(tmp_path) == ["00000000000000000000", f"{SMALL_COMMIT_LOG:020d}"]


def test_consume_queue_files_roll(open_store, tmp_path):
    store = open_store()
    msgs = [make_msg(queue_id=1, body=b"") for _ in range(250)]
    for m in msgs:
        store.put_message(m)
    directory = tmp_path / "store" / "consumequeue" / "TopicTest" / "1"
    assert sorted(os.listdir(directory)) == ["00000000000000000000", "00000000000000002000", "00000000000000004000"]
    raw = b"".join((directory / name).read_bytes() for name in sorted(os.listdir(directory)))
    expected = [(m.commit_log_offset, m.store_size, 2598919) for m in msgs]
    assert list(CQ_ENTRY.iter_unpack(raw[: 250 * 20])) == expected
    assert raw[250 * 20 :] == bytes(50 * 20)
    assert store.get_max_offset_in_queue("TopicTest", 1) == 250
    assert decode_records(b"".join(pull_everything(store, 1))) == msgs


def test_batch_consume_queue_entries_span_files(open_store, tmp_path):
    store = open_store()
    for _ in range(98):
        store.put_message(make_msg(body=b""))
    batch = [make_msg(body=b"") for _ in range(5)]
    assert store.put_messages(batch).queue_offset == 98
    assert store.get_max_offset_in_queue("TopicTest", 0) == 103
    directory = tmp_path / "store" / "consumequeue" / "TopicTest" / "0"
    assert sorted(os.listdir(directory)) == ["00000000000000000000", "00000000000000002000"]
    assert [m.queue_offset for m in decode_records(b"".join(pull_everything(store)))][-6:] == list(range(97, 103))
