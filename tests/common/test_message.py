import struct
import zlib

import pytest

from ferrymq.common.message import (
    batch_messages,
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    Message,
    MessageExt,
    Prop,
    SysFlag,
    check_record,
    decode_batch_body,
    decode_properties,
    decode_record,
    decode_records,
    decompress_body,
    encode_batch_body,
    encode_properties,
    encode_record,
    record_store_timestamp,
    stamp_record,
)
from ferrymq.common.validators import validate_group, validate_topic


def sample(**overrides) -> MessageExt:
    fields = dict(
        topic="TopicTest", body=b"Hello RocketMQ", flag=7,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0000010001000000000000000A0001"},
        queue_id=3, queue_offset=42, commit_log_offset=123456, sys_flag=0, born_timestamp=1_700_000_000_123,
        born_host=("192.168.1.10", 53012), store_timestamp=1_700_000_000_456, store_host=("10.0.0.1", 10911),
        reconsume_times=2, prepared_transaction_offset=0,
    )  # fmt: skip
    fields.update(overrides)
    return MessageExt(**fields)


# ------------------------------------------------------------------ properties


def test_encode_properties_has_no_trailing_separator():
    assert encode_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012"
    assert encode_properties({}) == ""


@pytest.mark.parametrize("text", ["A\x011\x02B\x012", "A\x011\x02B\x012\x02"])
def test_decode_properties_with_and_without_trailing_separator(text):
    assert decode_properties(text) == {"A": "1", "B": "2"}


def test_decode_properties_drops_empty_names_and_values_and_keeps_separators_in_values():
    assert decode_properties("\x01x\x02A\x01\x02B\x012\x02noseparator\x02C\x01a\x01b") == {"B": "2", "C": "a\x01b"}
    assert decode_properties("") == {}


# ------------------------------------------------------------------ record bytes


def test_hand_computed_record_vector():
    m = MessageExt(
        topic="T", body=b"hi", flag=2, properties={"A": "b"}, queue_id=1, queue_offset=3, commit_log_offset=4,
        sys_flag=0, born_timestamp=5, born_host=("1.2.3.4", 5), store_timestamp=6, store_host=("7.8.9.10", 11),
        reconsume_times=12, prepared_transaction_offset=13,
    )  # fmt: skip
    assert zlib.crc32(b"hi") == 0xD8932AAC  # so BODYCRC = 0xD8932AAC & 0x7FFFFFFF = 0x58932AAC
    expected = bytes.fromhex(
        "00000061"  # TOTALSIZE 97 = 84 fixed + (4 + 2) body + (1 + 1) topic + (2 + 3) properties
        "DAA320A7"  # MAGICCODE
        "58932AAC"  # BODYCRC
        "00000001"  # QUEUEID
        "00000002"  # FLAG
        "0000000000000003"  # QUEUEOFFSET (at 20)
        "0000000000000004"  # PHYSICALOFFSET (at 28)
        "00000000"  # SYSFLAG (at 36)
        "0000000000000005"  # BORNTIMESTAMP (at 40)
        "01020304" "00000005"  # BORNHOST 1.2.3.4:5 (at 48)
        "0000000000000006"  # STORETIMESTAMP
        "0708090A" "0000000B"  # STOREHOST 7.8.9.10:11
        "0000000C"  # RECONSUMETIMES
        "000000000000000D"  # PREPARED TRANSACTION OFFSET
        "00000002" "6869"  # BODY
        "01" "54"  # TOPIC "T"
        "0003" "410162"  # PROPERTIES "A\x01b"
    )
    assert bytes(encode_record(m)) == expected
    assert (m.body_crc, m.store_size) == (0x58932AAC, 97)
    decoded, end = decode_record(expected)
    assert end == 97
    assert decoded == m


@pytest.mark.parametrize(
    ("born", "store", "flag_bits", "size"),
    [
        (("192.168.1.10", 1), ("10.0.0.1", 2), 0, 84),
        (("::1", 1), ("10.0.0.1", 2), SysFlag.BORNHOST_V6, 96),
        (("192.168.1.10", 1), ("fe80::1:2", 2), SysFlag.STOREHOST_V6, 96),
        (("2001:db8::5", 1), ("2001:db8::6", 2), SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6, 108),
    ],
)
def test_round_trip_ipv4_and_ipv6_hosts(born, store, flag_bits, size):
    m = sample(born_host=born, store_host=store, body=b"", properties={})
    buf = encode_record(m)
    assert m.sys_flag & (SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6) == flag_bits
    assert len(buf) == size + 4 + 1 + len("TopicTest") + 2  # fixed part + empty body, topic, properties
    decoded, _ = decode_record(buf)
    assert decoded == m
    assert decoded.born_host == born and decoded.store_host == store


def test_host_bits_are_cleared_when_hosts_are_ipv4():
    m = sample(sys_flag=SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6 | SysFlag.COMPRESSED)
    encode_record(m)
    assert m.sys_flag == SysFlag.COMPRESSED


def test_round_trip_unicode_topic_properties_and_empty_body():
    m = sample(topic="主题-ü", body=b"", properties={"TAGS": "标签", "KEYS": "ключ 鍵", "emoji": "😀"})
    decoded, _ = decode_record(encode_record(m))
    assert decoded == m
    assert decoded.tags == "标签" and decoded.keys == ["ключ", "鍵"]


def test_round_trip_compressed_body():
    original = b"payload " * 1000
    for flags in (SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB, SysFlag.COMPRESSED):
        m = sample(body=zlib.compress(original, 5), sys_flag=flags)
        decoded, _ = decode_record(encode_record(m), check_crc=True)
        assert decoded.body != original
        assert decompress_body(decoded) == original
    assert decompress_body(sample()) == b"Hello RocketMQ"
    with pytest.raises(ValueError, match="compression"):
        decompress_body(sample(sys_flag=SysFlag.COMPRESSED | SysFlag.COMPRESSION_LZ4))


def test_decode_accepts_bytearray_and_memoryview():
    buf = encode_record(sample())
    for view in (buf, memoryview(buf), bytes(buf)):
        decoded, _ = decode_record(view)
        assert decoded == sample(body_crc=decoded.body_crc, store_size=len(buf))
        assert type(decoded.body) is bytes


def test_decode_records_back_to_back_until_end_or_blank():
    msgs = [sample(queue_offset=i, body=bytes([i]) * i) for i in range(5)]
    body = b"".join(encode_record(m) for m in msgs)
    assert decode_records(body) == msgs
    blank = struct.pack(">ii", 500, BLANK_MAGIC)
    assert decode_records(body + blank + b"\x00" * 492) == msgs
    assert decode_records(b"") == []


def test_decode_rejects_corruption():
    buf = bytearray(encode_record(sample()))
    with pytest.raises(ValueError, match="truncated|claims"):
        decode_record(bytes(buf[:-1]))
    bad_magic = bytearray(buf)
    bad_magic[4:8] = b"\x00\x00\x00\x00"
    with pytest.raises(ValueError, match="magic"):
        decode_record(bad_magic)
    flipped = bytearray(buf)
    flipped[buf.index(b"Hello")] ^= 0xFF  # inside the body
    decode_record(flipped)  # no CRC check by default
    with pytest.raises(ValueError, match="CRC"):
        decode_record(flipped, check_crc=True)
    with pytest.raises(ValueError):
        decode_records(bytes(buf) + b"\x01\x02")


def test_check_record():
    buf = encode_record(sample())
    assert check_record(buf) == len(buf)
    assert check_record(buf, check_crc=True) == len(buf)
    assert check_record(buf[:-1]) == -1
    assert check_record(struct.pack(">ii", 100, BLANK_MAGIC)) == 0
    assert check_record(bytes(200)) == -1
    corrupt = bytearray(buf)
    corrupt[buf.index(b"Hello")] ^= 0xFF  # inside the body
    assert check_record(corrupt) == len(buf)
    assert check_record(corrupt, check_crc=True) == -1
    wrong_size = bytearray(buf) + b"\x00"
    struct.pack_into(">i", wrong_size, 0, len(buf) + 1)  # TOTALSIZE disagrees with the field lengths
    assert check_record(wrong_size) == -1


@pytest.mark.parametrize("born", [("192.168.1.10", 1), ("2001:db8::5", 1)])
def test_stamp_record(born):
    m = sample(born_host=born, queue_offset=0, commit_log_offset=0, store_timestamp=0)
    buf = encode_record(m)
    stamp_record(buf, 77, 1 << 40, 1_700_000_999_999)
    decoded, _ = decode_record(buf)
    assert (decoded.queue_offset, decoded.commit_log_offset, decoded.store_timestamp) == (77, 1 << 40, 1_700_000_999_999)
    assert decoded.born_host == born and decoded.body == m.body and decoded.properties == m.properties
    assert struct.unpack_from(">i", buf, 0)[0] == len(buf) and struct.unpack_from(">i", buf, 4)[0] == MESSAGE_MAGIC
    assert record_store_timestamp(buf) == 1_700_000_999_999


def test_stamp_record_at_position_inside_a_batch():
    first, second = encode_record(sample()), encode_record(sample(born_host=("::1", 9)))
    both = first + second
    stamp_record(both, 5, 1000, 99, pos=len(first))
    a, b = decode_records(both)
    assert (a.queue_offset, a.commit_log_offset) == (42, 123456)
    assert (b.queue_offset, b.commit_log_offset, b.store_timestamp) == (5, 1000, 99)


def test_encode_limits():
    with pytest.raises(ValueError, match="topic"):
        encode_record(sample(topic="t" * 128))
    encode_record(sample(topic="t" * 127))
    with pytest.raises(ValueError, match="properties"):
        encode_record(sample(properties={"big": "v" * 32767}))
    with pytest.raises(ValueError, match="out of range"):
        encode_record(sample(queue_id=2**31))
    with pytest.raises(ValueError, match="IP"):
        encode_record(sample(born_host=("not-an-ip", 1)))


# ------------------------------------------------------------------ batch body


def test_batch_body_layout_and_round_trip():
    msgs = [
        Message("T", b"one", flag=1, properties={"TAGS": "a", "UNIQ_KEY": "X"}),
        Message("T", b"", properties={}),
        Message("T", "ü".encode(), properties={"KEYS": "k1 k2"}),
    ]
    body = encode_batch_body(msgs)
    props = b"TAGS\x01a\x02UNIQ_KEY\x01X"
    first_len = 4 + 4 + 4 + 4 + 4 + 3 + 2 + len(props)
    assert body[:first_len] == struct.pack(">iiiii", first_len, 0, 0, 1, 3) + b"one" + struct.pack(">h", len(props)) + props
    assert decode_batch_body(body) == [(m.flag, m.body, m.properties) for m in msgs]


def test_batch_body_accepts_trailing_separator_and_rejects_garbage():
    props = b"TAGS\x01a\x02"
    element = struct.pack(">iiiii", 22 + 2 + len(props), 0, 0, 0, 2) + b"hi" + struct.pack(">h", len(props)) + props
    assert decode_batch_body(element) == [(0, b"hi", {"TAGS": "a"})]
    with pytest.raises(ValueError):
        decode_batch_body(element[:-1])
    with pytest.raises(ValueError):
        decode_batch_body(element + b"\x00\x00\x00")


# ------------------------------------------------------------------ model helpers


def test_property_helpers():
    m = Message("T", b"")
    assert (m.tags, m.keys, m.uniq_key, m.delay_level, m.wait_store_msg_ok) == (None, [], None, 0, True)
    m.tags = "TagA"
    m.keys = ["k1", "k2"]
    m.uniq_key = "U"
    m.delay_level = 3
    m.properties[Prop.WAIT] = "false"
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U", "DELAY": "3", "WAIT": "false"}
    assert (m.tags, m.keys, m.uniq_key, m.delay_level, m.wait_store_msg_ok) == ("TagA", ["k1", "k2"], "U", 3, False)
    m.keys = "solo"
    m.tags = None
    m.delay_level = 0
    assert m.properties == {"KEYS": "solo", "UNIQ_KEY": "U", "WAIT": "false"}
    m.properties[Prop.DELAY] = "junk"
    assert m.delay_level == 0


def test_msg_ids():
    m = sample(commit_log_offset=0x1D1E2, store_host=("10.0.0.1", 10911))
    assert m.msg_id == "0A00000100002A9F000000000001D1E2"
    assert m.client_msg_id == "0A0000010001000000000000000A0001"
    m.properties.pop(Prop.UNIQ_KEY)
    assert m.client_msg_id == m.msg_id


def test_sysflag_helpers():
    assert SysFlag.transaction_type(SysFlag.TRANSACTION_ROLLBACK_TYPE | SysFlag.COMPRESSED) == SysFlag.TRANSACTION_ROLLBACK_TYPE
    assert SysFlag.is_dispatched(0) and SysFlag.is_dispatched(SysFlag.TRANSACTION_COMMIT_TYPE)
    assert not SysFlag.is_dispatched(SysFlag.TRANSACTION_PREPARED_TYPE)
    assert not SysFlag.is_dispatched(SysFlag.TRANSACTION_ROLLBACK_TYPE)


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("name", ["TopicTest", "%RETRY%group-1", "%DLQ%g", "a|b", "SCHEDULE_TOPIC_XXXX", "t" * 127])
def test_valid_topics(name):
    assert validate_topic(name) is None


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("", "blank"), ("  ", "blank"), ("a b", "illegal"), ("a/b", "illegal"), ("a.b", "illegal"), ("主题", "illegal"),
     ("ok\n", "illegal"), ("t" * 128, "longer")],
)  # fmt: skip
def test_invalid_topics(name, fragment):
    assert fragment in validate_topic(name)


def test_group_names():
    assert validate_group("g" * 255) is None
    assert "longer" in validate_group("g" * 256)
    assert "illegal" in validate_group("g:1")


def test_batch_messages_are_the_messages_keyword_construction_makes():
    elements = [(0, b"a", {"UNIQ_KEY": "u1"}), (7, b"bb", {"UNIQ_KEY": "u2", "CLUSTER": "theirs"})]
    shared = dict(queue_id=3, sys_flag=0x1, born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5),
                  store_host=("10.0.0.2", 10911), reconsume_times=2)
    body = encode_batch_body([Message("T", b, f, dict(p)) for f, b, p in elements])
    msgs, screened, waits = batch_messages("T", body, {"CLUSTER": "DefaultCluster"}, ("DELAY",), *shared.values())
    assert msgs == [MessageExt(topic="T", body=b, flag=f, properties={**p, "CLUSTER": "DefaultCluster"}, **shared)
                    for f, b, p in elements]
    assert msgs[0].queue_offset == msgs[0].commit_log_offset == msgs[0].store_timestamp == 0
    assert (screened, waits) == (False, True)
    assert batch_messages("T", body, {}, ("CLUSTER", "DELAY"), *shared.values())[1] is True
    with pytest.raises(ValueError, match="truncated batch element"):
        batch_messages("T", body + b"\x00", {}, (), *shared.values())