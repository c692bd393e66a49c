"""The compiled codecs (ferrymq/common/_message_codec.c, ferrymq/remoting/_header_codec.c)
against their pure-Python specifications; HPACK's block and Huffman decoders (ferrymq/grpc/_hpack.c) have their
own in tests/grpc/test_hpack.py, run here again without the extensions.

Every function is run in both versions over the same inputs, hand-picked and random, and
must give the same result or the same error. The byte-level vectors of the record layout
(tests/common/test_message.py, test_java_hash.py) and the fuzz regressions run against the
compiled version in this process and against pure Python in a subprocess below.
"""

from __future__ import annotations

import copy
import itertools
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from ferrymq.common import crc, java_hash, message, speedups
from ferrymq.common.message import MessageExt, encode_batch_body, encode_record
from ferrymq.grpc import hpack
from ferrymq.remoting import json_header
from ferrymq.remoting.codes import LanguageCode, SerializeType
from ferrymq.remoting.command import RemotingCommand, encode_frame, py_java_number
from ferrymq.remoting.errors import HeaderDecodeError
from ferrymq.store import dispatch, index_service

native = speedups.load("ferrymq.common._message_codec")
native_header = speedups.load("ferrymq.remoting._header_codec")
needs_native = pytest.mark.skipif(native is None or native_header is None, reason="FERRYMQ_NO_EXTENSIONS is set")
ROOT = Path(__file__).resolve().parents[2]

# Characters that matter to the codecs: both separators, ASCII, Latin-1, BMP and beyond it.
_ALPHABET = "ab_Z09 \x01\x02é中😀#"


def _random_text(rng: random.Random, longest: int = 24) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(longest + 1)))


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # the comparison includes the error's type and text
        return type(exc).__name__, str(exc)


def test_the_extension_is_built_unless_disabled():
    """`make` builds it (gcc and the Python headers are there): a silent fallback to pure
    Python would cost the broker a fifth of its throughput unnoticed."""
    if speedups.disabled:
        pytest.skip("FERRYMQ_NO_EXTENSIONS is set")
    for name in speedups.EXTENSIONS:
        assert speedups.load(name) is not None, f"{name} was not compiled: run `make venv` (needs gcc)"
    assert message.decode_properties is native.decode_properties
    assert message.decode_run is native.decode_run
    assert java_hash.java_string_hash is native.java_string_hash
    assert hpack.huffman_decode is speedups.load("ferrymq.grpc._hpack").huffman_decode
    assert hpack.Decoder.decode is not hpack.Decoder.py_decode  # a header block in one compiled call


def test_record_bodies_are_checksummed_with_zlib_ng_and_agree_with_zlib():
    """zlib-ng (a dependency) computes the records' CRC-32 several times faster than the
    interpreter's zlib; a silent fallback would cost 0.35 us a KiB on every stored message."""
    assert crc.crc32 is not zlib.crc32, "zlib-ng is not installed: run `make venv`"
    rng = random.Random(5)
    for size in (0, 1, 15, 16, 17, 63, 64, 65, 1023, 1024, 4096, 16385):
        body = rng.randbytes(size)
        assert crc.crc32(body) == zlib.crc32(body)
        assert crc.crc32(memoryview(body)[1:], 7) == zlib.crc32(memoryview(body)[1:], 7)
    stored = encode_record(MessageExt("T", b"x" * 1000))
    assert message.decode_record(stored, check_crc=True)[0].body_crc == zlib.crc32(b"x" * 1000) & 0x7FFFFFFF


@needs_native
def test_java_string_hash_matches_python():
    rng = random.Random(11)
    texts = ["", "TagA", "polygenelubricants", "😀", "a😀b", "x" * 100, "TopicTest#" + "AC11" * 8]
    texts += [_random_text(rng, 60) for _ in range(3000)]
    for text in texts:
        assert native.java_string_hash(text) == java_hash.py_java_string_hash(text), text
    with pytest.raises(TypeError):
        native.java_string_hash(b"bytes")


@needs_native
def test_properties_codec_matches_python():
    rng = random.Random(12)
    for _ in range(3000):
        text = _random_text(rng, 40)
        assert native.decode_properties(text) == message.py_decode_properties(text), repr(text)
        props = {_random_text(rng, 8): _random_text(rng, 12) for _ in range(rng.randrange(6))}
        assert message.encode_properties(props) == message.py_encode_properties(props), props
    assert message.encode_properties({}) == ""


@needs_native
def test_properties_that_are_not_text_fail_as_in_python():
    for props in ({"A": 1}, {2: "b"}, {"A": None}):
        assert _outcome(message.encode_properties, props) == _outcome(message.py_encode_properties, props)
    assert message.encode_properties({"A": "b"}.items().mapping) == "A\x01b"  # a read-only mapping view


def _batch(rng: random.Random) -> bytes:
    msgs = [MessageExt("T", rng.randbytes(rng.randrange(40)), flag=rng.randrange(-5, 5),
                       properties={_random_text(rng, 6) or "k": _random_text(rng, 6) or "v" for _ in range(rng.randrange(4))})
            for _ in range(rng.randrange(1, 5))]
    return encode_batch_body(msgs)


def _batch_args(rng: random.Random, body) -> tuple:
    """batch_messages' arguments for ``body``: the batch's extra properties and the names to look
    for drawn from the same small alphabet as the messages' (so both hit now and then); the
    same draw for both versions (the caller's rng state is restored)."""
    state = rng.getstate()
    extra = {rng.choice((_random_text(rng, 2) or "k", "WAIT")): rng.choice(("false", "true", "v"))
             for _ in range(rng.randrange(3))}
    screened = tuple(_random_text(rng, 2) or "WAIT" for _ in range(rng.randrange(3)))
    rng.setstate(state)
    return "T", body, extra, screened, 3, 0x10, 1_700_000_000_000, ("::1", 5), ("10.0.0.2", 10911), 1


@needs_native
def test_batch_body_decoding_matches_python_on_good_and_broken_bodies():
    rng = random.Random(13)
    for _ in range(1500):
        body = _batch(rng)
        assert native.decode_batch_body(body) == message.py_decode_batch_body(body)
        args = _batch_args(rng, body)
        assert native.batch_messages(*args) == message.py_batch_messages(*args)
        broken = bytearray(body)
        for _ in range(rng.randrange(1, 4)):  # flip bytes, cut the end or add garbage
            kind = rng.randrange(3)
            if kind == 0 and broken:
                broken[rng.randrange(len(broken))] = rng.randrange(256)
            elif kind == 1:
                del broken[rng.randrange(len(broken) + 1):]
            else:
                broken += rng.randbytes(rng.randrange(1, 30))
        for data in (bytes(broken), broken, memoryview(broken)):
            assert _outcome(native.decode_batch_body, data) == _outcome(message.py_decode_batch_body, data)
            assert _outcome(native.batch_messages, *_batch_args(rng, data)) == _outcome(message.py_batch_messages,
                                                                                          *_batch_args(rng, data))
    invalid_utf8 = struct.pack(">iiiii", 26, 0, 0, 0, 0) + struct.pack(">H", 4) + b"a\x01\xff\xfe"
    assert native.decode_batch_body(invalid_utf8) == message.py_decode_batch_body(invalid_utf8) == [(0, b"", {"a": "\ufffd\ufffd"})]


@needs_native
@pytest.mark.parametrize("born, store", [("10.0.0.1", "127.0.0.1"), ("::1", "10.0.0.2"), ("fe80::1", "2001:db8::7")])
def test_record_packing_matches_python(born, store):
    rng = random.Random(14)
    for _ in range(300):
        m = MessageExt(_random_text(rng, 10).replace("\x01", "") or "T", rng.randbytes(rng.randrange(300)),
                       properties={"UNIQ_KEY": _random_text(rng), "KEYS": _random_text(rng)},
                       queue_id=rng.randrange(-2**31, 2**31), flag=rng.randrange(-2**31, 2**31),
                       sys_flag=rng.randrange(0, 0x800), born_timestamp=rng.randrange(-2**63, 2**63),
                       born_host=(born, rng.randrange(65536)), store_host=(store, 10911),
                       reconsume_times=rng.randrange(100))
        m.queue_offset, m.commit_log_offset = rng.randrange(2**63), rng.randrange(2**63)
        m.store_timestamp, m.prepared_transaction_offset = rng.randrange(2**40), rng.randrange(-2**63, 2**63)
        record = encode_record(m)
        props = message.encode_properties(m.properties).encode()
        args = (m.topic.encode(), m.body, props, m.body_crc, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset,
                m.sys_flag, m.born_timestamp, message.pack_ip(born), m.born_host[1], m.store_timestamp,
                message.pack_ip(store), 10911, m.reconsume_times, m.prepared_transaction_offset)
        assert record == native.pack_record(*args) == message.py_pack_record(*args)
        assert message.decode_record(bytes(record))[0].body == m.body


@needs_native
@pytest.mark.parametrize("field, value", [("queue_id", 2**31), ("flag", -(2**31) - 1), ("queue_offset", 2**63),
                                          ("born_timestamp", -(2**63) - 1), ("reconsume_times", 2**40)])
def test_fields_out_of_range_are_refused_by_both(field, value):
    m = MessageExt("T", b"body", born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 2))
    setattr(m, field, value)
    with pytest.raises(ValueError, match="record field out of range"):
        encode_record(m)


# A put's run of records: the four calls the store makes once per put instead of once per message.


def _run_of_messages(rng: random.Random, born: str, count: int) -> list[MessageExt]:
    msgs = []
    for _ in range(count):
        m = MessageExt(_random_text(rng, 10).replace("\x01", "") or "T", rng.randbytes(rng.randrange(300)),
                       properties={k: v for k, v in (("UNIQ_KEY", _random_text(rng)), ("KEYS", _random_text(rng)),
                                                     ("TAGS", rng.choice(["", "TagA", _random_text(rng)]))) if k and v},
                       queue_id=rng.randrange(-2**31, 2**31), flag=rng.randrange(-2**31, 2**31),
                       sys_flag=rng.randrange(0, 0x800), born_timestamp=rng.randrange(-2**63, 2**63),
                       born_host=(born, rng.randrange(65536)), reconsume_times=rng.randrange(100))
        m.queue_offset, m.commit_log_offset = rng.randrange(2**63), rng.randrange(2**63)
        m.store_timestamp, m.prepared_transaction_offset = rng.randrange(2**40), rng.randrange(-2**63, 2**63)
        msgs.append(m)
    return msgs


def _twins(msgs: list[MessageExt]) -> tuple[list[MessageExt], list[MessageExt]]:
    return copy.deepcopy(msgs), copy.deepcopy(msgs)


@needs_native
@pytest.mark.parametrize("born, store", [("10.0.0.1", "127.0.0.1"), ("::1", "10.0.0.2"), ("fe80::1", "2001:db8::7")])
def test_a_runs_records_match_python(born, store):
    """Encode, stamp and place a run in both versions: the same bytes, the same fields on every
    message, the same msgIds, the same ConsumeQueue entries; each record as encode_record makes it."""
    rng = random.Random(17)
    prefix = message.offset_msg_id_prefix(store, 10911)
    for _ in range(60):
        a, b = _twins(_run_of_messages(rng, born, rng.randrange(1, 40)))
        singly = []
        for m in copy.deepcopy(a):
            m.store_host = (store, 10911)
            singly.append(encode_record(m))
        data_a, sizes_a = native.encode_records(a, (store, 10911), 1 << 20)
        data_b, sizes_b = message.py_encode_records(b, (store, 10911), 1 << 20)
        assert (data_a, sizes_a) == (data_b, sizes_b) and a == b
        assert data_a == b"".join(singly) and all(m.store_host == (store, 10911) for m in a)
        queue_offset, phys, now = rng.choice([-1, 0, rng.randrange(2**40)]), rng.randrange(2**50), rng.randrange(2**41)
        native.stamp_records(data_a, sizes_a, queue_offset, phys, now)
        message.py_stamp_records(data_b, sizes_b, queue_offset, phys, now)
        assert data_a == data_b
        ids_a = native.place_records(a, sizes_a, phys, queue_offset, now, prefix)
        ids_b = message.py_place_records(b, sizes_b, phys, queue_offset, now, prefix)
        assert ids_a == ids_b == [m.msg_id for m in a] and a == b
        decoded, pos = [], 0
        for size in sizes_a:  # the stamped bytes are the messages as placed
            decoded.append(message.decode_record(bytes(data_a[pos:pos + size]))[0])
            pos += size
        assert [(d.queue_offset, d.commit_log_offset, d.store_timestamp, d.body) for d in decoded] == \
            [(m.queue_offset, m.commit_log_offset, m.store_timestamp, m.body) for m in a]
        assert native.queue_entries(a, sizes_a, phys) == dispatch.py_queue_entries(b, sizes_b, phys)


@needs_native
def test_a_runs_index_postings_match_python():
    rng = random.Random(19)
    for _ in range(300):
        msgs = _run_of_messages(rng, "10.0.0.1", rng.randrange(0, 12))
        for m in msgs:  # keys with runs of spaces, empty ones, none at all; rolled-back records
            if rng.random() < 0.3:
                m.properties["KEYS"] = rng.choice([" a  b ", "", " ", "k1 k2 k3", "é 中 😀"])
            if rng.random() < 0.2:
                m.properties.pop("UNIQ_KEY", None)
        sizes, phys = [rng.randrange(100, 2000) for _ in msgs], rng.randrange(2**40)
        topic = _random_text(rng, 8) or "T"
        a, b = [("earlier", 1)], [("earlier", 1)]
        native.index_postings(topic, msgs, sizes, phys, a)
        index_service.py_index_postings(topic, msgs, sizes, phys, b)
        assert a == b


@needs_native
def test_a_run_stops_at_the_message_the_store_refuses_in_both():
    rng = random.Random(18)
    msgs = _run_of_messages(rng, "10.0.0.1", 5)
    msgs[2].body = bytes(5000)
    a, b = _twins(msgs)
    assert native.encode_records(a, ("10.0.0.2", 1), 4096) == message.py_encode_records(b, ("10.0.0.2", 1), 4096) == (2, "body")
    msgs[2].body, msgs[3].properties = b"x", {"K": "v" * 40000}
    a, b = _twins(msgs)
    assert native.encode_records(a, ("10.0.0.2", 1), 4096) == message.py_encode_records(b, ("10.0.0.2", 1), 4096) \
        == (3, "properties")
    assert a == b  # the messages before it were encoded in both, the ones after untouched


@needs_native
@pytest.mark.parametrize("field, value, error", [
    ("queue_id", 2**31, "ValueError"), ("flag", -(2**31) - 1, "ValueError"), ("queue_offset", 2**63, "ValueError"),
    ("born_timestamp", -(2**63) - 1, "ValueError"), ("reconsume_times", 2**40, "ValueError"),
    ("topic", "T" * 128, "ValueError"), ("born_host", ("not an ip", 1), "ValueError"),
    ("prepared_transaction_offset", None, "TypeError"), ("flag", "7", "TypeError")])  # a bug of ours, not input
def test_a_run_with_a_field_out_of_range_fails_in_both(field, value, error):
    msgs = [MessageExt("T", b"body", born_host=("10.0.0.1", 1)) for _ in range(3)]
    setattr(msgs[1], field, value)
    a, b = _twins(msgs)
    native_error, python_error = _outcome(native.encode_records, a, ("10.0.0.2", 2), 1024), \
        _outcome(message.py_encode_records, b, ("10.0.0.2", 2), 1024)
    assert native_error[0] == python_error[0] == error
    assert python_error[1].startswith(native_error[1])  # Python's may add struct's detail


@needs_native
def test_stamping_refuses_sizes_that_do_not_fit_in_both():
    data, sizes = message.py_encode_records([MessageExt("T", b"x", born_host=("10.0.0.1", 1))], ("10.0.0.2", 2), 1024)
    for bad in ([sizes[0] + 1], [10], [sizes[0], sizes[0]]):
        assert _outcome(native.stamp_records, bytearray(data), bad, 0, 0, 0) == \
            _outcome(message.py_stamp_records, bytearray(data), bad, 0, 0, 0)
        assert _outcome(native.stamp_records, bytearray(data), bad, 0, 0, 0)[0] == "ValueError"


# A run of records read back (pull bodies, CommitLog reads): decode_run, stopping where
# check_record would refuse a message record.

_HOSTS = ["10.0.0.1", "127.0.0.1", "::1", "fe80::1", "2001:db8::7", "::ffff:10.1.2.3", "1:2:3:4:5:6:7:8", "::"]


def _separator_free_text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(_ALPHABET.replace("\x01", "").replace("\x02", "")) for _ in range(rng.randrange(1, longest + 1)))


def _stored_messages(rng: random.Random, count: int) -> list[MessageExt]:
    """Messages as a store keeps them: IPv4 and IPv6 hosts (random ones too), empty and large
    bodies, no properties or unicode ones, unicode topics; encode_record gives them their record's
    derived fields, so each equals what its record decodes to."""
    msgs = []
    for _ in range(count):
        born, store = (rng.choice([*_HOSTS, message.unpack_ip(rng.randbytes(rng.choice([4, 16])))]) for _ in range(2))
        body = rng.randbytes(rng.randrange(60_000, 200_000)) if rng.random() < 0.03 else \
            rng.choice([b"", b"x", rng.randbytes(rng.randrange(1, 300))])
        m = MessageExt(_random_text(rng, 10), body, flag=rng.randrange(-2**31, 2**31),
                       properties={_separator_free_text(rng, 8): _separator_free_text(rng, 16)
                                   for _ in range(rng.choice([0, 0, 1, 4]))},
                       queue_id=rng.randrange(-2**31, 2**31), sys_flag=rng.randrange(0, 0x800),
                       born_timestamp=rng.randrange(-2**63, 2**63), born_host=(born, rng.randrange(-2**31, 2**31)),
                       store_host=(store, rng.choice([10911, rng.randrange(65536)])), reconsume_times=rng.randrange(100))
        m.queue_offset, m.commit_log_offset = rng.randrange(-2**63, 2**63), rng.randrange(2**63)
        m.store_timestamp, m.prepared_transaction_offset = rng.randrange(2**40), rng.randrange(-2**63, 2**63)
        encode_record(m)
        msgs.append(m)
    return msgs


@needs_native
def test_a_decoded_run_matches_python_from_any_position_up_to_any_limit():
    """The run decoded from inside a buffer (garbage ahead of it) up to a limit that may cut a
    record: the whole records before the limit, in both versions, equal to the messages encoded."""
    rng = random.Random(23)
    for _ in range(300):
        msgs = _stored_messages(rng, rng.randrange(0, 10))
        records = [bytes(encode_record(m)) for m in msgs]
        start = rng.randrange(0, 40)
        buf = rng.randbytes(start) + b"".join(records)
        ends = list(itertools.accumulate(map(len, records), initial=start))
        limit = rng.choice([len(buf), len(buf) + rng.randrange(1, 100), rng.randrange(start, len(buf) + 1),
                            rng.choice(ends) + rng.randrange(-3, 4)])
        whole = max(sum(end <= limit for end in ends) - 1, 0)  # records wholly before the limit, if it is past start
        expected = (ends[whole], msgs[:whole])
        for data in (buf, bytearray(buf), memoryview(buf)):
            assert native.decode_run(data, start, limit) == message.py_decode_run(data, start, limit) == expected
        if records:  # from the second record on, as a caller resuming a segment
            assert native.decode_run(buf, ends[1], len(buf)) == message.py_decode_run(buf, ends[1], len(buf)) \
                == (len(buf), msgs[1:])


@needs_native
def test_a_run_with_invalid_utf8_in_topic_and_properties_decodes_with_replacement_in_both():
    """Bad sequences become U+FFFD, as Java's new String(bytes, UTF_8) and _decode have them."""
    topic, props = b"T\xff\xfe", b"a\x01\xff\xfe\x02\xe2\x82\x01b\x02c\x01\xed\xa0\x80\x02\xc3"
    args = (topic, b"body", props, 0, 1, 0, 2, 3, message.SysFlag.STOREHOST_V6, 4, message.pack_ip("10.0.0.1"), 5, 6,
            message.pack_ip("::1"), 7, 0, 8)
    record = bytes(message.py_pack_record(*args))
    stop, (m,) = native.decode_run(record, 0, len(record))
    assert (stop, [m]) == message.py_decode_run(record, 0, len(record))
    assert stop == len(record) and m.topic == "T\ufffd\ufffd"
    assert m.properties == {"a": "\ufffd\ufffd", "\ufffd": "b", "c": "\ufffd\ufffd\ufffd"}
    assert (m.born_host, m.store_host) == (("10.0.0.1", 5), ("::1", 7))


def _record_fields(record: bytes) -> dict[str, tuple[int, int]]:
    """Where a record's fields of its layout are, as (position, width): TOTALSIZE, sysflag (its host
    bits size the record), BODY, TOPIC and PROPERTIES lengths."""
    sys_flag = struct.unpack_from(">i", record, message.SYS_FLAG_POS)[0]
    body_at = message._fixed_for(sys_flag).size
    topic_at = body_at + struct.unpack_from(">i", record, body_at - 4)[0]
    return {"total": (0, 4), "sys_flag": (message.SYS_FLAG_POS, 4), "body_len": (body_at - 4, 4),
            "topic_len": (topic_at, 1), "props_len": (topic_at + 1 + record[topic_at], 2)}


def _one_by_one(data: bytes | bytearray | memoryview, check_crc: bool = False) -> list[MessageExt]:
    """decode_records as it was before decode_run: each record through decode_record."""
    out, pos = [], 0
    while pos < len(data):
        if len(data) - pos >= 8 and struct.unpack_from(">i", data, pos + 4)[0] == message.BLANK_MAGIC:
            break
        m, pos = message.decode_record(data, pos, check_crc=check_crc)
        out.append(m)
    return out


_BLANK = struct.pack(">ii", 120, message.BLANK_MAGIC) + bytes(112)


@needs_native
def test_a_damaged_run_stops_where_python_stops():
    """Byte flips, cuts, garbage, blank records and length fields overwritten (negative, huge, one
    off) in runs of records: both versions stop at the same position with the same messages, and
    decode_records answers (or fails) as decoding the records one by one did."""
    rng = random.Random(24)
    for _ in range(2000):
        msgs = _stored_messages(rng, rng.randrange(1, 5))
        records = [bytearray(encode_record(m)) for m in msgs]
        fields = [(record, list(_record_fields(bytes(record)).values())) for record in records]
        for _ in range(rng.randrange(1, 3)):
            record = rng.choice(records)
            kind = rng.randrange(5)
            if kind == 0:  # a length field (or the sysflag) of an encoded record overwritten, in its width
                record, positions = rng.choice(fields)
                at, width = rng.choice(positions)
                if at + width <= len(record):
                    old = int.from_bytes(record[at:at + width], "big", signed=True)
                    value = rng.choice([-1, -2**31, 2**31 - 1, old + 1, old - 1, old ^ 0x30, rng.randrange(-2**31, 2**31)])
                    record[at:at + width] = (value & (1 << 8 * width) - 1).to_bytes(width, "big")
            elif kind == 1:  # a byte flipped anywhere
                record[rng.randrange(len(record))] ^= 1 << rng.randrange(8)
            elif kind == 2:  # a record cut (to one byte at least: every piece stays one to pick)
                del record[rng.randrange(1, len(record) + 1):]
            elif kind == 3:  # a blank record in the middle
                records.insert(rng.randrange(len(records) + 1), bytearray(_BLANK))
            else:  # garbage after the records
                records.append(bytearray(rng.choice([rng.randbytes(rng.randrange(1, 200)), bytes(rng.randrange(1, 200))])))
        buf = b"".join(records)
        pos = rng.choice([0, 0, len(records[0]), rng.randrange(len(buf) + 10)])
        limit = rng.choice([len(buf), len(buf) + 7, rng.randrange(len(buf) + 1), -1])
        for data in (buf, bytearray(buf)):
            assert _outcome(native.decode_run, data, pos, limit) == _outcome(message.py_decode_run, data, pos, limit)
        assert _outcome(message.decode_records, buf) == _outcome(_one_by_one, buf)


@needs_native
def test_a_run_stops_at_a_blank_record_garbage_or_a_negative_length_in_both():
    a, b, c = (bytes(encode_record(m)) for m in _stored_messages(random.Random(25), 3))
    negative_total = bytearray(b)
    negative_total[0:4] = struct.pack(">i", -len(b))
    negative_body = bytearray(b)
    at = _record_fields(b)["body_len"][0]
    negative_body[at:at + 4] = struct.pack(">i", -1)
    cases = [
        (a + _BLANK + c, len(a)),
        (a + b + b"\x00" * 20, len(a + b)),
        (a + b + b"garbage!" + c, len(a + b)),
        (a + bytes(negative_total) + c, len(a)),
        (a + bytes(negative_body) + c, len(a)),
        (a + b[:7], len(a)),  # not even a header left
        (a + b + c, len(a + b + c)),
    ]
    for buf, stop in cases:
        assert native.decode_run(buf, 0, len(buf))[0] == message.py_decode_run(buf, 0, len(buf))[0] == stop
        assert native.decode_run(buf, 0, len(buf)) == message.py_decode_run(buf, 0, len(buf))
    for pos, limit in ((len(a) + 1, 10**6), (10**6, 10**6), (0, -5), (0, 0)):
        assert native.decode_run(a, pos, limit) == message.py_decode_run(a, pos, limit) == (pos, [])
    assert _outcome(native.decode_run, a, -1, len(a)) == _outcome(message.py_decode_run, a, -1, len(a)) \
        == ("ValueError", "decode_run() needs a position >= 0, not -1")


def test_decode_records_keeps_its_answers_and_errors():
    """Good records then a malformed one: the ValueError of decoding that record alone, at its
    position; a blank record or the end: the messages before it (whichever decode_run runs)."""
    msgs = _stored_messages(random.Random(26), 3)
    good = b"".join(bytes(encode_record(m)) for m in msgs)
    assert message.decode_records(good) == message.decode_records(bytearray(good + _BLANK)) == msgs
    assert message.decode_records(good, check_crc=True) == msgs
    bad_magic = bytearray(encode_record(msgs[0]))
    bad_magic[4:8] = struct.pack(">i", 0x12345678)
    negative_body = bytearray(encode_record(msgs[0]))
    at = _record_fields(bytes(negative_body))["body_len"][0]
    negative_body[at:at + 4] = struct.pack(">i", -1)
    n = len(good)
    for tail, error in [(b"\x01\x02", f"truncated record at {n}: 2 bytes left"),
                        (bytes(bad_magic), f"bad magic 0x12345678 at {n}"),
                        (bytes(negative_body), f"bad body length -1 in record at {n}"),
                        (bytes(encode_record(msgs[1]))[:-1], f"record at {n} claims {msgs[1].store_size} bytes, "
                                                             f"{msgs[1].store_size - 1} available")]:
        for data in (good + tail, bytearray(good + tail), memoryview(good + tail)):
            with pytest.raises(ValueError) as raised:
                message.decode_records(data)
            assert str(raised.value) == error == _outcome(_one_by_one, data)[1]


# JSON headers as peers write them: Java's fastjson (escaped control characters in properties),
# FerryMQ's own encoder, and the odd shapes the Python decoder coerces (the compiled one hands
# those back to it).
_JSON_HEADERS = [
    b'{"code":310,"extFields":{"a":"pg","b":"TopicTest","c":"TBW102","d":"4","e":"3","f":"0","g":"1700000000000",'
    b'"h":"0","i":"UNIQ_KEY\\u0001AC11\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA","j":"0","k":"false","m":"false"},'
    b'"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":395}',
    b'{"code":0,"flag":1,"language":"PYTHON","opaque":7,"remark":"caf\xc3\xa9 \\"q\\" \\n \\ud83d\\ude00","serializeTypeCurrentRPC":"JSON","version":407}',
    b' { "code" : 11 , "extFields" : { } , "language" : 9 , "opaque" : -3 } ',
    b'{}', b'{"code":"12"}', b'{"code":1.0}', b'{"code":null}', b'{"code":true}', b'{"code":012}', b'{"code":-0}',
    b'{"code":123456789012345678901}', b'{"language":"KLINGON"}', b'{"language":null}', b'{"remark":null}',
    b'{"remark":"\\ud800"}', b'{"extFields":{"a":1,"b":null,"c":["x"]}}', b'{"extFields":null}', b'{"extFields":[]}',
    b'{"x":{"y":[1,2]},"code":5}', b'{"code":5,"code":6}', b'{"code":5}x', b'{"code":5', b'[1]', b'', b'\xef\xbb\xbf{}',
    b'{"remark":"a\x01b"}', b'{"remark":"\xff\xfe\xe2\x82"}', b'{"remark":"\\u00e9\\u0000\\/\\b\\f\\r\\t"}',
    b'{"remark":"\\x"}', b'{"remark":"\\u12"}', b'{"extFields":{"k":"v","k":"w"},"extFields":{"z":"1"}}',
]


@needs_native
@pytest.mark.parametrize("raw", _JSON_HEADERS)
def test_json_header_decoding_matches_python(raw):
    def decoded(fn, arg):
        try:
            return fn(arg)
        except HeaderDecodeError as exc:
            return "refused", str(exc)

    expected = decoded(json_header.decode_json_header, raw.decode("utf-8", "replace"))
    assert decoded(json_header.decode_json_header_bytes, raw) == expected
    assert decoded(json_header.decode_json_header_bytes, memoryview(bytearray(raw))) == expected


@needs_native
def test_json_header_decoding_matches_python_on_random_headers():
    rng = random.Random(15)
    for _ in range(2000):
        fields = (rng.randrange(-2**31, 2**31), rng.choice(list(LanguageCode)).value, rng.randrange(500),
                  rng.randrange(-2**31, 2**31), rng.randrange(4), rng.choice([None, _random_text(rng)]),
                  {_random_text(rng, 6): _random_text(rng) for _ in range(rng.randrange(5))})
        raw = json_header.encode_json_header(fields)
        assert json_header.decode_json_header_bytes(raw) == json_header.decode_json_header(raw.decode()) == fields


@needs_native
def test_header_values_match_python():
    """A header's typed fields read in one call, both versions: values, the bad field's index."""
    from ferrymq.remoting import command

    kinds = (command.FIELD_STR, command.FIELD_INT, command.FIELD_LONG, command.FIELD_BOOL)
    texts = ["", "0", "-0", "+7", "12", "-2147483648", "2147483648", "9223372036854775807", "-9223372036854775809",
             "true", "TRUE", "True ", "false", "x", "1.0", "٣", "tRuE", "İrue", " 5"]
    rng = random.Random(22)
    for _ in range(3000):
        spec = tuple((f"f{i}", rng.choice(kinds), rng.choice([None, -1, "d", False]), rng.random() < 0.2)
                     for i in range(rng.randrange(1, 8)))
        ext = {name: rng.choice(texts) for name, *_ in spec if rng.random() < 0.8}
        assert native_header.header_values(ext, spec) == command.py_header_values(ext, spec)
    assert native_header.header_values({"a": 5}, (("a", 0, None, False),)) is NotImplemented


def _python_frame(cmd: RemotingCommand) -> bytes:
    header = json_header.encode_json_header((int(cmd.code), int(cmd.language), int(cmd.version), int(cmd.opaque),
                                             int(cmd.flag), cmd.remark, cmd.ext_fields))
    body = cmd.body or b""
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


@needs_native
def test_json_frame_encoding_matches_python():
    rng = random.Random(16)
    for _ in range(2000):
        cmd = RemotingCommand(rng.randrange(-2**31, 2**31), language=rng.choice([*LanguageCode, 99]),
                              version=rng.randrange(500), opaque=rng.randrange(-2**31, 2**31), flag=rng.randrange(4),
                              remark=rng.choice([None, "", _random_text(rng), "\x00\x1f\x7f\"\\\n\r\t\b\f/"]),
                              ext_fields={_random_text(rng, 6): _random_text(rng) for _ in range(rng.randrange(5))},
                              body=rng.choice([None, b"", rng.randbytes(rng.randrange(100))]))
        assert json_header.encode_json_frame(
            (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields), cmd.body,
        ) == _python_frame(cmd) == encode_frame(cmd)


@needs_native
@pytest.mark.parametrize("cmd", [
    RemotingCommand(1, remark="\ud800"),  # a lone surrogate cannot be UTF-8
    RemotingCommand(1, ext_fields={"n": 5, "none": None}),  # not text yet: Python's conversion
    RemotingCommand(1, ext_fields={3: "x"}),
    RemotingCommand(2**70),
    RemotingCommand(1, body=bytearray(b"x")),
], ids=["lone-surrogate", "non-text-values", "non-text-key", "huge-code", "bytearray-body"])
def test_frames_the_compiled_encoder_leaves_to_python(cmd):
    fields = (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields)
    assert json_header.encode_json_frame(fields, cmd.body) is None
    assert cmd.serialize_type == SerializeType.JSON


@needs_native
def test_header_numbers_parse_as_java_does_in_both():
    texts = ["0", "-0", "+7", "007", "-", "+", "", " 1", "1 ", "1_000", "١٢", "²", "0x10", "1.0", "12a",
             str(2**31 - 1), str(2**31), str(-(2**31)), str(-(2**31) - 1), str(2**63 - 1), str(2**63),
             str(-(2**63)), str(-(2**63) - 1), "9" * 30, "-" + "0" * 40 + "5"]
    rng = random.Random(17)
    texts += [rng.choice(["", "-", "+"]) + str(rng.randrange(2**rng.randrange(1, 70))) for _ in range(3000)]
    for text in texts:
        for bits in (32, 64):
            assert native_header.java_number(text, bits) == py_java_number(text, bits), (text, bits)
    assert native_header.java_number(str(2**31 - 1), 32) == 2**31 - 1 and native_header.java_number(str(2**31), 32) is None


def _slot_table(rng: random.Random, size: int, first: int):
    from array import array
    return array("i", [rng.choice([0, 0, -1, rng.randrange(1, first + 6)]) for _ in range(size)])


@needs_native
def test_index_entries_match_python():
    from ferrymq.store.index_file import py_index_entries
    rng = random.Random(11)
    for _ in range(3000):
        slot_num = rng.choice([1, 2, 7, 64, 5003])
        first = rng.choice([0, 1, 2, rng.randrange(3, 10_000)])
        postings = [(_random_text(rng), rng.choice([0, rng.randrange(2**63), -rng.randrange(2**63)]))
                    for _ in range(rng.randrange(0, 40))]
        begin_ts = rng.choice([0, -5, 1_700_000_000_000])
        store_ts = rng.choice([begin_ts, begin_ts + rng.randrange(10**9), begin_ts - 1000, 2**62])
        slots = _slot_table(rng, slot_num, first)
        native_slots = slots[:]
        want = py_index_entries(list(postings), slots, slot_num, first, begin_ts, store_ts)
        got = native.index_entries(list(postings), native_slots, slot_num, first, begin_ts, store_ts)
        assert got == want and native_slots == slots, (postings, slot_num, first, begin_ts, store_ts)


@needs_native
@pytest.mark.parametrize("postings", [[("k", 2**63)], [(7, 1)], [("k", 1, 2)], [["k", 1]], [("a", 1), ("b", "x")]])
def test_index_postings_the_compiled_version_leaves_to_python(postings):
    """Nothing is linked by the compiled code for a shape it does not take; Python's answer
    (or error) is the answer, and a failing call leaves the slot table as it was."""
    from ferrymq.store.index_file import index_entries, py_index_entries
    rng = random.Random(3)
    slots = _slot_table(rng, 7, 5)
    before = slots[:]
    assert native.index_entries(postings, slots, 7, 5, 0, 1) is NotImplemented and slots == before
    python_slots = slots[:]
    assert _outcome(index_entries, postings, slots, 7, 5, 0, 1) == _outcome(py_index_entries, postings, python_slots, 7, 5, 0, 1)
    assert slots == python_slots


@needs_native
def test_linking_slots_in_a_mapped_table_matches_python():
    """The slots an index put links, written into the mapped slot table: the same bytes from
    both versions; a shape the compiled one does not take (a slot outside the table, not a pair
    of ints, a number past int32) leaves the table untouched and Python decides."""
    from ferrymq.store.index_file import link_slots, py_link_slots
    rng = random.Random(17)
    for _ in range(2000):
        size, base = rng.choice([1, 7, 64]), rng.choice([0, 40])
        first = rng.choice([0, 1, rng.randrange(2, 10_000), 2**31 - 3])
        linked = [(rng.choice([rng.randrange(size), size, -1, "x"]) if rng.random() < 0.05 else rng.randrange(size), 0)
                  for _ in range(rng.randrange(0, 8))]
        table = bytearray(rng.randbytes(base + size * 4))
        want, got = bytearray(table), bytearray(table)
        if native.link_slots(got, base, linked, first) is NotImplemented:
            assert got == table
            assert _outcome(link_slots, got, base, linked, first) == _outcome(py_link_slots, want, base, linked, first)
        else:
            py_link_slots(want, base, linked, first)
        assert got == want, (linked, first, base)


def test_codec_vectors_hold_in_pure_python_too():
    """The layout's byte vectors, the codec tests and the fuzz regressions, run again with
    the extension switched off: both implementations answer to the same specification."""
    if speedups.disabled:
        pytest.skip("this is the pure-Python run")
    env = {**os.environ, "FERRYMQ_NO_EXTENSIONS": "1"}
    tests = ["tests/common/test_message.py", "tests/common/test_java_hash.py", "tests/common/test_speedups.py",
             "tests/fuzz", "tests/store/test_store_index.py", "tests/remoting/test_remoting_codec.py",
             "tests/remoting/test_remoting_bad_input.py", "tests/grpc/test_hpack.py", "-k", "not short_fuzzing_run"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
