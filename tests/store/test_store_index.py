"""IndexFile (docs/wire-format.md#indexfile) byte for byte, and QUERY_MESSAGE at the store level."""

import errno
import os
import struct

import pytest
from store_helpers import SMALL_HASH_SLOTS, SMALL_INDEX_NUM, make_msg

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import decode_record, decode_records
from ferrymq.store import PutStatus
from ferrymq.store.index_file import INDEX_HEADER_SIZE, IndexFile, index_file_size, index_key_hash


def index_files(tmp_path, root="store"):
    directory = tmp_path / root / "index"
    return sorted(directory.iterdir()) if directory.exists() else []


def test_key_hash_is_javas_abs_hash_code():
    assert index_key_hash("TopicTest#k1") == abs(java_string_hash("TopicTest#k1"))
    # A string whose hashCode is Integer.MIN_VALUE: Math.abs overflows, RocketMQ uses 0.
    s = "polygenelubricants"
    assert java_string_hash(s) == -(2**31)
    assert index_key_hash(s) == 0


def test_file_layout_is_rocketmq_s(open_store, tmp_path):
    store = open_store()
    store.commit_log.clock = lambda: 1_700_000_000_000
    first = make_msg(UNIQ_KEY="U1", KEYS="order-1 order-2")
    assert store.put_message(first).status is PutStatus.PUT_OK
    store.commit_log.clock = lambda: 1_700_000_005_500
    second = make_msg(UNIQ_KEY="U2")
    store.put_message(second)
    store.flush()

    (path,) = index_files(tmp_path)
    assert len(path.name) == 17 and path.name.isdigit()  # yyyyMMddHHmmssSSS
    raw = path.read_bytes()
    assert len(raw) == index_file_size(SMALL_HASH_SLOTS, SMALL_INDEX_NUM) == 40 + SMALL_HASH_SLOTS * 4 + SMALL_INDEX_NUM * 20
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = struct.unpack_from(">qqqqii", raw)
    assert (begin_ts, end_ts) == (1_700_000_000_000, 1_700_000_005_500)
    assert (begin_phy, end_phy) == (first.commit_log_offset, second.commit_log_offset)
    assert index_count == 1 + 4  # starts at 1; U1, order-1, order-2, U2
    keys = ["TopicTest#U1", "TopicTest#order-1", "TopicTest#order-2", "TopicTest#U2"]
    assert slot_count == len({index_key_hash(k) % SMALL_HASH_SLOTS for k in keys})
    entries = INDEX_HEADER_SIZE + SMALL_HASH_SLOTS * 4
    for n, key in enumerate(keys, start=1):
        key_hash, phy, time_diff, prev = struct.unpack_from(">iqii", raw, entries + n * 20)
        assert key_hash == index_key_hash(key)
        assert phy == (first if n < 4 else second).commit_log_offset
        assert time_diff == (0 if n < 4 else 5)  # whole seconds since beginTimestamp
        older = [m for m in range(1, n) if index_key_hash(keys[m - 1]) % SMALL_HASH_SLOTS == key_hash % SMALL_HASH_SLOTS]
        assert prev == (older[-1] if older else 0)  # chained to the previous entry of the same slot
        (slot,) = struct.unpack_from(">i", raw, 40 + (key_hash % SMALL_HASH_SLOTS) * 4)
        assert slot == max(m for m in range(1, 5) if index_key_hash(keys[m - 1]) % SMALL_HASH_SLOTS == key_hash % SMALL_HASH_SLOTS)
    assert raw[entries : entries + 20] == bytes(20)  # entry 0 is never used


def test_query_by_key_and_by_uniq_key(open_store):
    store = open_store()
    msgs = [make_msg(queue_id=i % 3, body=b"m%d" % i, UNIQ_KEY=f"U{i}", KEYS=f"order-{i % 5} all") for i in range(40)]
    for m in msgs:
        store.put_message(m)
    got = decode_records(b"".join(store.query_message("TopicTest", "order-3", 32, 0, 2**62).records))
    assert [m.body for m in got] == [m.body for m in msgs if m.properties["KEYS"].startswith("order-3 ")]
    by_id = decode_records(b"".join(store.query_message("TopicTest", "U17", 32, 0, 2**62).records))
    assert [m.body for m in by_id] == [b"m17"]
    assert len(store.query_message("TopicTest", "all", 32, 0, 2**62).records) == 32  # maxNum
    assert len(store.query_message("TopicTest", "all", 1000, 0, 2**62).records) == 40  # maxMsgsNumBatch is 64
    assert store.query_message("OtherTopic", "U17", 32, 0, 2**62).records == []  # keys are topic#key
    result = store.query_message("TopicTest", "U17", 32, 0, 2**62)
    assert result.index_last_update_phyoffset == msgs[-1].commit_log_offset
    assert result.index_last_update_timestamp == msgs[-1].store_timestamp


def test_query_by_time_range(open_store):
    store = open_store()
    for i, ts in enumerate((1_000_000, 2_000_000, 3_000_000)):
        store.commit_log.clock = lambda ts=ts: 1_700_000_000_000 + ts
        store.put_message(make_msg(body=b"%d" % i, KEYS="k"))
    base = 1_700_000_000_000

    def bodies(begin, end):
        return [m.body for m in decode_records(b"".join(store.query_message("TopicTest", "k", 32, begin, end).records))]

    assert bodies(0, 2**62) == [b"0", b"1", b"2"]
    assert bodies(base + 1_500_000, base + 2_500_000) == [b"1"]
    assert bodies(base + 2_000_000, 2**62) == [b"1", b"2"]
    assert bodies(base + 3_000_001, 2**62) == []


def test_hash_collisions_return_candidates_for_the_client_to_check(open_store):
    store = open_store(max_hash_slot_num=1)  # every key in one slot: one chain
    for i in range(10):
        store.put_message(make_msg(body=b"%d" % i, KEYS=f"key-{i}"))
    records = store.query_message("TopicTest", "key-4", 32, 0, 2**62).records
    # Only entries whose full hash matches are returned; the client filters by the key itself.
    assert [decode_record(r)[0].keys for r in records] == [["key-4"]]


def test_index_rolls_to_a_new_file_when_full(open_store, tmp_path):
    store = open_store(max_index_num=10)  # 9 entries per file
    msgs = [make_msg(body=b"%d" % i, KEYS=f"a{i} b{i}") for i in range(20)]
    for m in msgs:
        store.put_message(m)
    files = index_files(tmp_path)
    assert len(files) == 5  # 40 keys, 9 per file
    assert files == sorted(files)
    for i in (0, 4, 13, 19):
        (r,) = store.query_message("TopicTest", f"b{i}", 32, 0, 2**62).records
        assert decode_record(r)[0].body == b"%d" % i
    second = IndexFile(str(files[1]), SMALL_HASH_SLOTS, 10)
    assert second.header.begin_phy_offset >= msgs[4].commit_log_offset  # continues where the first ended
    second.close()


def test_rolled_back_transactions_are_not_indexed_prepared_ones_are(open_store):
    from ferrymq.common.message import SysFlag
    store = open_store()
    prepared = make_msg(KEYS="tx")
    prepared.sys_flag = SysFlag.TRANSACTION_PREPARED_TYPE
    rolled_back = make_msg(KEYS="tx")
    rolled_back.sys_flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
    store.put_message(prepared)
    store.put_message(rolled_back)
    (r,) = store.query_message("TopicTest", "tx", 32, 0, 2**62).records
    assert decode_record(r)[0].commit_log_offset == prepared.commit_log_offset


def test_index_can_be_disabled(open_store, tmp_path):
    store = open_store(message_index_enable=False)
    store.put_message(make_msg(KEYS="k"))
    assert store.query_message("TopicTest", "k", 32, 0, 2**62).records == []
    assert index_files(tmp_path) == []


def test_query_after_a_clean_restart_and_after_a_crash(open_store, tmp_path):
    import shutil
    store = open_store()
    msgs = [make_msg(queue_id=i % 2, body=b"%d" % i * 300, UNIQ_KEY=f"U{i}", KEYS=f"k{i % 7}") for i in range(120)]
    for m in msgs:
        store.put_message(m)
    crashed_root = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed_root)  # as kill -9 leaves it: abort file, no final flush
    store.shutdown()

    def check(s):
        for i in (0, 57, 119):
            (r,) = s.query_message("TopicTest", f"U{i}", 32, 0, 2**62).records
            assert decode_record(r)[0].body == msgs[i].body
        got = decode_records(b"".join(s.query_message("TopicTest", "k3", 64, 0, 2**62).records))
        assert [m.commit_log_offset for m in got] == [m.commit_log_offset for m in msgs if m.properties["KEYS"] == "k3"]

    check(open_store())
    crashed = open_store(crashed_root)
    assert not crashed.last_exit_clean
    check(crashed)


def test_entries_linked_after_the_last_header_write_are_unlinked_after_a_crash(open_store, tmp_path):
    store = open_store()
    store.put_message(make_msg(body=b"old", KEYS="k"))
    f = store.index.files[-1]
    f.flush()  # the header on disk now counts the first entry
    store.put_message(make_msg(body=b"new", KEYS="k"))  # chains to it; entry and slot written, header not
    assert struct.unpack_from(">i", os.pread(f._fd, 40, 0), 36)[0] == 2
    reopened = IndexFile(f.path, SMALL_HASH_SLOTS, SMALL_INDEX_NUM)  # as a restart after kill -9 reads it
    assert reopened.recover_tail() == 1
    found: list[int] = []
    reopened.select_phy_offsets(found, "TopicTest#k", 32, 0, 2**62)
    assert found == [0]  # the chain is whole again: the older entry is still reachable
    reopened.close()


def test_wrong_index_size_setting_is_refused(open_store, tmp_path):
    store = open_store()
    store.put_message(make_msg(KEYS="k"))
    store.shutdown()
    with pytest.raises(ValueError, match="maxHashSlotNum"):
        open_store(max_hash_slot_num=SMALL_HASH_SLOTS + 1)


def put_keyed_messages(store, count: int) -> None:
    store.commit_log.clock = lambda: 1_700_000_000_000
    for i in range(count):  # two keys each, colliding slots among them (101 slots)
        assert store.put_message(make_msg(body=b"%d" % i, UNIQ_KEY=f"U{i}", KEYS=f"k{i % 13}")).status is PutStatus.PUT_OK


def test_slots_stored_through_the_mapping_are_on_disk_as_pwrite_would_put_them(open_store, tmp_path, monkeypatch):
    mapped = open_store(tmp_path / "mapped")
    put_keyed_messages(mapped, 300)
    (path,) = index_files(tmp_path, "mapped")
    # The header and slot table were allocated before the first store through the mapping.
    assert os.stat(path).st_blocks * 512 >= INDEX_HEADER_SIZE + SMALL_HASH_SLOTS * 4
    (r,) = mapped.query_message("TopicTest", "U123", 32, 0, 2**62).records  # readers see the stores
    assert decode_record(r)[0].body == b"123"
    mapped.shutdown()

    def unsupported(*_args):
        raise OSError(errno.EOPNOTSUPP, "fallocate is not supported here")

    monkeypatch.setattr("ferrymq.store.index_file.os.posix_fallocate", unsupported)
    plain = open_store(tmp_path / "plain")  # slots written with pwrite, one by one
    put_keyed_messages(plain, 300)
    plain.shutdown()
    (plain_path,) = index_files(tmp_path, "plain")
    assert plain_path.read_bytes() == path.read_bytes()
    reopened = open_store(tmp_path / "mapped")
    assert [decode_record(r)[0].body for r in reopened.query_message("TopicTest", "k5", 64, 0, 2**62).records] == \
        [b"%d" % i for i in range(300) if i % 13 == 5]


def test_a_slot_table_that_cannot_be_allocated_refuses_the_put_and_leaves_no_trace(open_store, tmp_path, monkeypatch):
    store = open_store()
    put_keyed_messages(store, 3)
    store.index.files[-1]._slot_map = None  # as a file the writer has not mapped yet

    def disk_full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ferrymq.store.index_file.os.posix_fallocate", disk_full)
    result = store.put_message(make_msg(body=b"refused", UNIQ_KEY="U-refused"))
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.get_max_offset_in_queue("TopicTest", 0) == 3
    assert store.query_message("TopicTest", "U-refused", 32, 0, 2**62).records == []
