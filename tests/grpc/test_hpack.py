"""HPACK (ferrymq/grpc/hpack.py) against RFC 7541: the examples of Appendix C decoded to the
header lists and dynamic tables the RFC states, the Huffman code of Appendix B typed in again
here and used to encode, the encoder's blocks read back, and malformed blocks refused. Every
decoder test runs on both decoders, the compiled one (ferrymq/grpc/_hpack.c's decode_block and
huffman_decode) and the pure-Python one (Decoder.py_decode, py_huffman_decode), and random and
mutated blocks must get the same answers, errors and dynamic tables from both."""

from __future__ import annotations

import random
import sys
import tracemalloc
from collections import Counter

import pytest

from ferrymq.common import speedups
from ferrymq.grpc import hpack
from ferrymq.grpc.hpack import Decoder, Encoder, HeaderListTooLarge, HpackError
from tests.support import missing_prerequisite

native = speedups.load("ferrymq.grpc._hpack")

# Appendix B, "code as hex/len" for symbols 0-255 and EOS, eight a line.
_APPENDIX_B = """
1ff8/13 7fffd8/23 fffffe2/28 fffffe3/28 fffffe4/28 fffffe5/28 fffffe6/28 fffffe7/28
fffffe8/28 ffffea/24 3ffffffc/30 fffffe9/28 fffffea/28 3ffffffd/30 fffffeb/28 fffffec/28
fffffed/28 fffffee/28 fffffef/28 ffffff0/28 ffffff1/28 ffffff2/28 3ffffffe/30 ffffff3/28
ffffff4/28 ffffff5/28 ffffff6/28 ffffff7/28 ffffff8/28 ffffff9/28 ffffffa/28 ffffffb/28
14/6 3f8/10 3f9/10 ffa/12 1ff9/13 15/6 f8/8 7fa/11
3fa/10 3fb/10 f9/8 7fb/11 fa/8 16/6 17/6 18/6
0/5 1/5 2/5 19/6 1a/6 1b/6 1c/6 1d/6
1e/6 1f/6 5c/7 fb/8 7ffc/15 20/6 ffb/12 3fc/10
1ffa/13 21/6 5d/7 5e/7 5f/7 60/7 61/7 62/7
63/7 64/7 65/7 66/7 67/7 68/7 69/7 6a/7
6b/7 6c/7 6d/7 6e/7 6f/7 70/7 71/7 72/7
fc/8 73/7 fd/8 1ffb/13 7fff0/19 1ffc/13 3ffc/14 22/6
7ffd/15 3/5 23/6 4/5 24/6 5/5 25/6 26/6
27/6 6/5 74/7 75/7 28/6 29/6 2a/6 7/5
2b/6 76/7 2c/6 8/5 9/5 2d/6 77/7 78/7
79/7 7a/7 7b/7 7ffe/15 7fc/11 3ffd/14 1ffd/13 ffffffc/28
fffe6/20 3fffd2/22 fffe7/20 fffe8/20 3fffd3/22 3fffd4/22 3fffd5/22 7fffd9/23
3fffd6/22 7fffda/23 7fffdb/23 7fffdc/23 7fffdd/23 7fffde/23 ffffeb/24 7fffdf/23
ffffec/24 ffffed/24 3fffd7/22 7fffe0/23 ffffee/24 7fffe1/23 7fffe2/23 7fffe3/23
7fffe4/23 1fffdc/21 3fffd8/22 7fffe5/23 3fffd9/22 7fffe6/23 7fffe7/23 ffffef/24
3fffda/22 1fffdd/21 fffe9/20 3fffdb/22 3fffdc/22 7fffe8/23 7fffe9/23 1fffde/21
7fffea/23 3fffdd/22 3fffde/22 fffff0/24 1fffdf/21 3fffdf/22 7fffeb/23 7fffec/23
1fffe0/21 1fffe1/21 3fffe0/22 1fffe2/21 7fffed/23 3fffe1/22 7fffee/23 7fffef/23
fffea/20 3fffe2/22 3fffe3/22 3fffe4/22 7ffff0/23 3fffe5/22 3fffe6/22 7ffff1/23
3ffffe0/26 3ffffe1/26 fffeb/20 7fff1/19 3fffe7/22 7ffff2/23 3fffe8/22 1ffffec/25
3ffffe2/26 3ffffe3/26 3ffffe4/26 7ffffde/27 7ffffdf/27 3ffffe5/26 fffff1/24 1ffffed/25
7fff2/19 1fffe3/21 3ffffe6/26 7ffffe0/27 7ffffe1/27 3ffffe7/26 7ffffe2/27 fffff2/24
1fffe4/21 1fffe5/21 3ffffe8/26 3ffffe9/26 ffffffd/28 7ffffe3/27 7ffffe4/27 7ffffe5/27
fffec/20 fffff3/24 fffed/20 1fffe6/21 3fffe9/22 1fffe7/21 1fffe8/21 7ffff3/23
3fffea/22 3fffeb/22 1ffffee/25 1ffffef/25 fffff4/24 fffff5/24 3ffffea/26 7ffff4/23
3ffffeb/26 7ffffe6/27 3ffffec/26 3ffffed/26 7ffffe7/27 7ffffe8/27 7ffffe9/27 7ffffea/27
7ffffeb/27 ffffffe/28 7ffffec/27 7ffffed/27 7ffffee/27 7ffffef/27 7fffff0/27 3ffffee/26
3fffffff/30
"""
CODES = [(int(code, 16), int(length)) for code, length in (item.split("/") for item in _APPENDIX_B.split())]


def huffman_encode(data: bytes) -> bytes:
    bits, count = 0, 0
    for byte in data:
        code, length = CODES[byte]
        bits, count = (bits << length) | code, count + length
    pad = -count % 8  # the most significant bits of EOS: ones
    return ((bits << pad) | ((1 << pad) - 1)).to_bytes((count + pad) // 8, "big")


def integer(value: int, prefix_bits: int, flags: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([flags | value])
    out, value = [flags | limit], value - limit
    while value >= 128:
        out.append(128 | value % 128)
        value //= 128
    return bytes(out + [value])


def string(raw: bytes, huffman: bool) -> bytes:
    if huffman:
        raw = huffman_encode(raw)
    return integer(len(raw), 7, 0x80 if huffman else 0) + raw


def compiled():
    """The compiled module; missing, a skip (a failure under CI=true unless switched off)."""
    if speedups.disabled:
        pytest.skip("FERRYMQ_NO_EXTENSIONS is set")
    if native is None:
        missing_prerequisite("ferrymq.grpc._hpack was not compiled: run `make venv` (needs gcc)")
    return native


@pytest.fixture(params=["python", "c"])
def huffman_decode(request):
    """Each Huffman decoder."""
    return hpack.py_huffman_decode if request.param == "python" else compiled().huffman_decode


def compiled_decode(decoder, block, max_list_bytes=65536):
    """Decoder.decode as the compiled module runs it."""
    return native.decode_block(decoder, block, max_list_bytes)


@pytest.fixture(params=["python", "c"])
def decoding(request, monkeypatch):
    """Decoder objects run by each decoder: Decoder.py_decode with py_huffman_decode (all Python,
    as where the extension was not built), or the compiled decode_block."""
    if request.param == "python":
        monkeypatch.setattr(hpack, "huffman_decode", hpack.py_huffman_decode)
        monkeypatch.setattr(Decoder, "decode", Decoder.py_decode)
    else:
        compiled()
        monkeypatch.setattr(Decoder, "decode", compiled_decode)
    return request.param


@pytest.fixture
def both(monkeypatch):
    """The two decoders as functions of (decoder, block, max_list_bytes), Python's first."""
    compiled()
    monkeypatch.setattr(hpack, "huffman_decode", hpack.py_huffman_decode)
    return Decoder.py_decode, compiled_decode


def test_the_code_lengths_give_appendix_bs_code():
    assert len(CODES) == 257 and CODES[hpack.EOS] == (0x3FFFFFFF, 30)
    assert hpack.huffman_codes() == CODES
    assert sum(2.0 ** -length for _, length in CODES) == 1.0  # a full tree: no code unused


# Appendix A, one entry a line from index 1: the name, then the value if it has one.
_APPENDIX_A = """
:authority|:method GET|:method POST|:path /|:path /index.html|:scheme http|:scheme https|:status 200|:status 204
:status 206|:status 304|:status 400|:status 404|:status 500|accept-charset|accept-encoding gzip, deflate
accept-language|accept-ranges|accept|access-control-allow-origin|age|allow|authorization|cache-control
content-disposition|content-encoding|content-language|content-length|content-location|content-range|content-type
cookie|date|etag|expect|expires|from|host|if-match|if-modified-since|if-none-match|if-range|if-unmodified-since
last-modified|link|location|max-forwards|proxy-authenticate|proxy-authorization|range|referer|refresh|retry-after
server|set-cookie|strict-transport-security|transfer-encoding|user-agent|vary|via|www-authenticate
"""


def test_the_static_table_is_appendix_as():
    entries = _APPENDIX_A.strip().replace("\n", "|").split("|")
    assert hpack.STATIC_TABLE == tuple(tuple(entry.partition(" ")[::2]) for entry in entries)
    assert len(hpack.STATIC_TABLE) == 61


# Appendix C: (block, header list, dynamic table newest first, table size) per header block.
_C2 = [
    ("400a637573746f6d2d6b65790d637573746f6d2d686561646572", [("custom-key", "custom-header")],
     [("custom-key", "custom-header")], 55),
    ("040c2f73616d706c652f70617468", [(":path", "/sample/path")], [], 0),
    ("100870617373776f726406736563726574", [("password", "secret")], [], 0),
    ("82", [(":method", "GET")], [], 0),
]

_REQUEST_HEADERS = [
    [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")],
    [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com"),
     ("cache-control", "no-cache")],
    [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"), (":authority", "www.example.com"),
     ("custom-key", "custom-value")],
]
_REQUEST_TABLES = [
    ([(":authority", "www.example.com")], 57),
    ([("cache-control", "no-cache"), (":authority", "www.example.com")], 110),
    ([("custom-key", "custom-value"), ("cache-control", "no-cache"), (":authority", "www.example.com")], 164),
]
_C3 = ["828684410f7777772e6578616d706c652e636f6d",
       "828684be58086e6f2d6361636865",
       "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"]
_C4 = ["828684418cf1e3c2e5f23a6ba0ab90f4ff",
       "828684be5886a8eb10649cbf",
       "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"]

_DATE_21, _DATE_22 = "Mon, 21 Oct 2013 20:13:21 GMT", "Mon, 21 Oct 2013 20:13:22 GMT"
_LOCATION = ("location", "https://www.example.com")
_COOKIE = ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
_RESPONSE_HEADERS = [
    [(":status", "302"), ("cache-control", "private"), ("date", _DATE_21), _LOCATION],
    [(":status", "307"), ("cache-control", "private"), ("date", _DATE_21), _LOCATION],
    [(":status", "200"), ("cache-control", "private"), ("date", _DATE_22), _LOCATION, ("content-encoding", "gzip"),
     _COOKIE],
]
_RESPONSE_TABLES = [
    ([_LOCATION, ("date", _DATE_21), ("cache-control", "private"), (":status", "302")], 222),
    ([(":status", "307"), _LOCATION, ("date", _DATE_21), ("cache-control", "private")], 222),
    ([_COOKIE, ("content-encoding", "gzip"), ("date", _DATE_22)], 215),
]
_C5 = ["4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e17687474"
       "70733a2f2f7777772e6578616d706c652e636f6d",
       "4803333037c1c0bf",
       "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d415344"
       "4a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31"]
_C6 = ["488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9"
       "ae82ae43d3",
       "4883640effc1c0bf",
       "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b39"
       "60d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"]


@pytest.mark.parametrize("block, headers, table, size", _C2, ids=["C.2.1", "C.2.2", "C.2.3", "C.2.4"])
def test_appendix_c2_single_fields(decoding, block, headers, table, size):
    decoder = Decoder()
    assert decoder.decode(bytes.fromhex(block)) == headers
    assert decoder.dynamic_table == table and decoder.table_size == size


@pytest.mark.parametrize("blocks, headers, tables, table_limit", [
    (_C3, _REQUEST_HEADERS, _REQUEST_TABLES, 4096),
    (_C4, _REQUEST_HEADERS, _REQUEST_TABLES, 4096),
    (_C5, _RESPONSE_HEADERS, _RESPONSE_TABLES, 256),
    (_C6, _RESPONSE_HEADERS, _RESPONSE_TABLES, 256),
], ids=["C.3", "C.4", "C.5", "C.6"])
def test_appendix_c_header_lists_on_one_connection(decoding, blocks, headers, tables, table_limit):
    decoder = Decoder(max_table_size=table_limit)
    for block, expected, (table, size) in zip(blocks, headers, tables, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == expected
        assert decoder.dynamic_table == table
        assert decoder.table_size == size == sum(len(n) + len(v) + 32 for n, v in table)


_RFC_HUFFMAN = [
    ("f1e3c2e5f23a6ba0ab90f4ff", b"www.example.com"), ("a8eb10649cbf", b"no-cache"),
    ("25a849e95ba97d7f", b"custom-key"), ("25a849e95bb8e8b4bf", b"custom-value"), ("6402", b"302"),
    ("640eff", b"307"), ("aec3771a4b", b"private"), ("9bd9ab", b"gzip"),
    ("d07abe941054d444a8200595040b8166e082a62d1bff", b"Mon, 21 Oct 2013 20:13:21 GMT"),
    ("9d29ad171863c78f0b97c8e9ae82ae43d3", b"https://www.example.com"),
    ("94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
     b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
]


@pytest.mark.parametrize("coded, text", _RFC_HUFFMAN)
def test_huffman_strings_of_appendix_c(huffman_decode, coded, text):
    assert huffman_decode(bytes.fromhex(coded)) == text
    assert huffman_encode(text) == bytes.fromhex(coded)  # the encoder here, checked on the RFC's bytes


def test_huffman_decodes_every_symbol_and_any_buffer(huffman_decode):
    every = bytes(range(256))
    assert huffman_decode(huffman_encode(every)) == every
    assert huffman_decode(huffman_encode(every[::-1])) == every[::-1]
    assert huffman_decode(b"") == b""
    coded = huffman_encode(b"x-mq-request-id")
    assert huffman_decode(bytearray(coded)) == huffman_decode(memoryview(coded)) == b"x-mq-request-id"


@pytest.mark.parametrize("coded, error", [
    (b"\xff", "Huffman padding longer than 7 bits"),  # 8 bits of padding alone
    (huffman_encode(b"a") + b"\xff", "Huffman padding longer than 7 bits"),  # 'a' then 11 ones
    (bytes([0b00011000]), "Huffman padding not all ones"),  # 'a' then 000
    (bytes([0b00011110]), "Huffman padding not all ones"),
    (huffman_encode(b"ab")[:-1] + bytes([huffman_encode(b"ab")[-1] & 0xFE]), "Huffman padding not all ones"),
    (b"\xff\xff\xff\xfc", "EOS symbol in a Huffman string"),  # EOS, then 2 bits
    (huffman_encode(b"a") + b"\xff\xff\xff\xff", "EOS symbol in a Huffman string"),  # 'a', EOS, padding
    (b"\xff\xff\xff\xff" + huffman_encode(b"abc"), "EOS symbol in a Huffman string"),
], ids=["padding-only", "padding-11-bits", "padding-zeros", "padding-0110", "padding-last-bit-0", "eos", "eos-after-a",
        "eos-first"])
def test_huffman_refuses_bad_padding_and_eos(huffman_decode, coded, error):
    with pytest.raises(ValueError, match=error):
        huffman_decode(coded)


def test_huffman_round_trips_random_byte_strings(huffman_decode):
    rng = random.Random(7541)
    for _ in range(400):
        data = rng.randbytes(rng.randrange(60))
        assert huffman_decode(huffman_encode(data)) == data
        text = bytes(rng.choice(b"0123456789abcdef-") for _ in range(rng.randrange(50)))  # UUIDs' alphabet
        assert huffman_decode(huffman_encode(text)) == text


def _outcome(fn, data):
    try:
        return "ok", fn(data)
    except ValueError as exc:
        return "ValueError", str(exc)


def test_both_huffman_decoders_agree_on_garbage():
    native_decode = compiled().huffman_decode
    rng = random.Random(5)
    seen = set()
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(12))
        if rng.random() < 0.5:  # mostly good strings with damage at the end
            data = huffman_encode(rng.randbytes(rng.randrange(10)))[:-1] + data[:1]
        expected = _outcome(hpack.py_huffman_decode, data)
        assert _outcome(native_decode, data) == expected, data.hex()
        seen.add(expected[1] if expected[0] != "ok" else "ok")
    assert len(seen) == 4  # decoded, and each of the three errors


# The encoder, read back.


def test_the_encoder_indexes_static_fields_and_writes_other_literals_without_indexing():
    encoder = Encoder()
    assert encoder.encode([(":method", "GET"), (":scheme", "https"), (":authority", "")]) == b"\x82\x87\x81"
    assert encoder.encode([(":path", "/sample/path")]) == bytes.fromhex(_C2[1][0])  # C.2.2 exactly
    assert encoder.encode([("password", "secret")]) == b"\x00\x08password\x06secret"
    assert encoder.encode([("content-type", "application/grpc")]) == b"\x0f\x10\x10application/grpc"  # index 31
    assert encoder.encode([]) == b""


def test_encoder_output_decodes_to_the_same_list_and_leaves_the_table_empty(decoding):
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/apache.rocketmq.v2.MessagingService/SendMessage"),
               (":authority", "127.0.0.1:8081"), ("content-type", "application/grpc"), ("te", "trailers"),
               ("grpc-timeout", "3000m"), ("x-mq-client-id", "host@1234#0"), ("empty", ""),
               ("www-authenticate", "x"), ("set-cookie", "v" * 300), ("x-" + "n" * 200, "caf\xe9 \x00\xff"),
               (":status", "200"), ("grpc-status", "0")]
    block = Encoder().encode(headers)
    decoder = Decoder()
    assert decoder.decode(block) == decoder.decode(memoryview(bytearray(block))) == headers
    huffman_block = bytes.fromhex(_C4[0])
    assert Decoder().decode(memoryview(huffman_block)) == Decoder().decode(bytearray(huffman_block)) == _REQUEST_HEADERS[0]
    assert decoder.dynamic_table == [] and decoder.table_size == 0
    rng = random.Random(3)
    for _ in range(200):
        listed = [(rng.choice([name for name, _ in hpack.STATIC_TABLE] + ["x-a", "grpc-message", "k" * 20]),
                   rng.randbytes(rng.randrange(140)).decode("latin-1")) for _ in range(rng.randrange(8))]
        assert decoder.decode(Encoder().encode(listed)) == listed


@pytest.mark.parametrize("headers", [[("Content-Type", "x")], [("x-Mq", "1")], [(":Method", "GET")]])
def test_the_encoder_refuses_names_that_are_not_lowercase(headers):
    with pytest.raises(ValueError, match="not lowercase"):
        Encoder().encode(headers)


def test_the_encoder_refuses_text_latin_1_cannot_carry():
    with pytest.raises(ValueError):
        Encoder().encode([("x-a", "\u20ac")])


def test_random_blocks_with_huffman_and_indexing_decode(decoding):
    """Blocks written here as a full encoder would: new fields indexed, Huffman strings, later
    fields indexed from the dynamic table, in a table small enough to evict."""
    rng = random.Random(41)
    decoder = Decoder(max_table_size=300)
    mirror: list[tuple[str, str]] = []  # the table as this side keeps it, newest first

    def mirror_add(field):
        mirror.insert(0, field)
        while sum(len(n) + len(v) + 32 for n, v in mirror) > 300:
            mirror.pop()

    for _ in range(150):
        block, expected = b"", []
        for _ in range(rng.randrange(1, 8)):
            kind = rng.randrange(4)
            if kind == 0 and mirror:
                index = rng.randrange(len(mirror))
                block += integer(62 + index, 7, 0x80)
                expected.append(mirror[index])
                continue
            name = rng.choice(["x-mq-request-id", "grpc-timeout", rng.randbytes(rng.randrange(1, 20)).hex()])
            value = rng.randbytes(rng.randrange(80)).decode("latin-1")
            field = (name, value)
            flags, prefix = ((0x40, 6), (0x00, 4), (0x10, 4))[kind % 3]
            block += integer(0, prefix, flags) + string(name.encode(), rng.random() < 0.5) \
                + string(value.encode("latin-1"), rng.random() < 0.5)
            expected.append(field)
            if flags == 0x40 and len(name) + len(value) + 32 <= 300:
                mirror_add(field)
            elif flags == 0x40:
                mirror.clear()
        assert decoder.decode(block) == expected
        assert decoder.dynamic_table == mirror


# Table size updates, the dynamic table's bounds, integers.


def test_size_updates_at_the_start_of_a_block_resize_and_evict(decoding):
    decoder = Decoder()
    decoder.decode(bytes.fromhex(_C3[0]))
    decoder.decode(bytes.fromhex(_C3[1]))
    assert decoder.table_size == 110
    assert decoder.decode(b"\x3f\x9a\x0a") == []  # C.1.2: 1337 on a 5-bit prefix
    assert decoder.table_capacity == 1337 and decoder.table_size == 110
    assert decoder.decode(b"\x3f\x17\x82") == [(":method", "GET")]  # to 54: the newest (53) stays
    assert decoder.dynamic_table == [("cache-control", "no-cache")]
    assert decoder.decode(b"\x20\x3f\xe1\x1f") == []  # to 0, which empties it, then to 4096
    assert decoder.dynamic_table == [] and decoder.table_capacity == 4096
    assert decoder.decode(b"\x3f\x80\x80\x00") == [] and decoder.table_capacity == 31  # redundant octets


def test_an_entry_larger_than_the_table_empties_it(decoding):
    decoder = Decoder(max_table_size=100)
    decoder.decode(bytes.fromhex(_C3[0]))
    assert decoder.table_size == 57
    decoder.decode(b"\x40" + string(b"k", False) + string(b"v" * 70, False))  # 103 octets
    assert decoder.dynamic_table == [] and decoder.table_size == 0


def test_lowering_the_advertised_limit_shrinks_the_table(decoding):
    decoder = Decoder()
    for block in _C3:
        decoder.decode(bytes.fromhex(block))
    decoder.max_table_size = 120
    assert decoder.table_capacity == 120 and decoder.table_size == 107
    assert decoder.dynamic_table == [("custom-key", "custom-value"), ("cache-control", "no-cache")]
    with pytest.raises(HpackError, match="above the limit of 120"):
        decoder.decode(b"\x3f\x5a")  # 121


_MALFORMED = [
    (b"\x80", "index 0"),
    (b"\xbe", "index 62 beyond the tables"),
    (b"\x7e\x01v", "index 62 beyond the tables"),  # a literal's indexed name
    (b"\x0f\x2f\x01v", "index 62 beyond the tables"),
    (b"\xff\x80\x80\x80\x80\x80\x80\x80\x80\x01", "longer than 8 continuation octets"),
    (b"\xff\xff\xff\xff\xff\x7f", "larger than 2\\*\\*32"),
    (b"\x3f\xe2\x1f", "size update to 4097, above the limit of 4096"),
    (b"\x82\x20", "size update after a header field"),
    (b"\x00\x81\xff\x00", "Huffman padding longer than 7 bits"),
    (b"\x00\x81\x18\x00", "Huffman padding not all ones"),
    (b"\x00\x84\xff\xff\xff\xff\x00", "EOS symbol in a Huffman string"),
    (b"\x40\x84\xff\xff\xff\xff\x00", "EOS symbol in a Huffman string"),  # in a literal's name
    (b"\x7f\x80\x80\x80\x80\x80\x80\x80\x80\x01", "longer than 8 continuation octets"),  # a name's index
    (b"\x3f\xff\xff\xff\xff\x7f", "larger than 2\\*\\*32"),  # a size update
    (b"\x00\x7f\xff\xff\xff\xff\x0f", "larger than 2\\*\\*32"),  # a string's length
    (b"\x00" + integer(2**32, 7), "string literal of 4294967296 octets runs past"),  # 2**32 itself is read
    (b"\x00" + integer(2**32 + 1, 7, 0x80), "larger than 2\\*\\*32"),  # a Huffman string's length
    (integer(2**32, 5, 0x20), "size update to 4294967296, above the limit of 4096"),
    (integer(2**32, 6, 0x40), "index 4294967296 beyond the tables \\(61 static, 0 dynamic entries\\)"),
    (integer(2**32, 7, 0x80), "index 4294967296 beyond the tables"),
    (b"\x00\x01a\x01b\x3f\xe1\x1f", "size update after a header field"),  # after a literal
    (b"\x40\x01a\x01b\x20", "size update after a header field"),  # after an indexed literal
    (b"\x1f\x2f\x01v", "index 62 beyond the tables"),  # never indexed, its name's index continued
]


@pytest.mark.parametrize("block, error", _MALFORMED)
def test_malformed_blocks_are_refused(decoding, block, error):
    with pytest.raises(HpackError, match=error):
        Decoder().decode(block)


def test_indexes_beyond_a_filled_table_and_size_updates_within_it(decoding):
    decoder = Decoder()
    decoder.decode(bytes.fromhex(_C3[0]))
    assert decoder.decode(b"\xbe") == [(":authority", "www.example.com")]
    with pytest.raises(HpackError, match="index 63 beyond the tables \\(61 static, 1 dynamic entries\\)"):
        decoder.decode(b"\xbf")
    assert Decoder().decode(b"\x3f\xe1\x1f\x20\x82") == [(":method", "GET")]  # 4096 then 0: two updates


_TRUNCATED = [
    (b"\x41", "ends before a string literal"),  # the value of a literal named :authority
    (b"\x40", "ends before a string literal"),  # its name
    (b"\x40\x0acustom", "string literal of 10 octets runs past"),
    (b"\x40\x01k", "ends before a string literal"),  # its value
    (b"\x04\x8c\xf1\xe3", "string literal of 12 octets runs past"),  # a Huffman one
    (b"\xff", "ends inside an integer"),
    (b"\xff\x80", "ends inside an integer"),
    (b"\x3f", "ends inside an integer"),
    (b"\x7f", "ends inside an integer"),
    (b"\x0f", "ends inside an integer"),
    (b"\x00\x7f", "ends inside an integer"),
    (b"\x00\x7f\x01ab", "string literal of 128 octets runs past"),
    (b"\x00\x01a\xff", "ends inside an integer"),  # a value's length, continued
]


@pytest.mark.parametrize("block, error", _TRUNCATED)
def test_truncated_blocks_are_refused(decoding, block, error):
    with pytest.raises(HpackError, match=error):
        Decoder().decode(block)


@pytest.mark.parametrize("blocks, headers", [(_C4, _REQUEST_HEADERS), (_C6, _RESPONSE_HEADERS)], ids=["C.4", "C.6"])
def test_every_cut_of_a_block_decodes_a_prefix_or_fails_as_hpack(decoding, blocks, headers):
    """Cut anywhere: a whole number of fields decodes to the list's start, anything else is an
    HpackError, never an IndexError or the like."""
    raw = bytes.fromhex(blocks[0])
    for cut in range(len(raw)):
        try:
            decoded = Decoder(max_table_size=256).decode(raw[:cut])
        except HpackError:
            continue
        assert decoded == headers[0][:len(decoded)]


def test_garbage_raises_only_hpack_errors(decoding):
    rng = random.Random(9)
    for _ in range(2000):
        decoder = Decoder(max_table_size=rng.choice([0, 64, 4096]))
        try:
            decoder.decode(rng.randbytes(rng.randrange(1, 24)))
        except HpackError:
            pass
        assert decoder.table_size <= decoder.table_capacity <= decoder.max_table_size


# The header list's size.


def _outcome_of(fn, *args):
    try:
        return "ok", fn(*args)
    except HpackError as exc:
        return type(exc).__name__, str(exc)


def test_an_oversized_header_list_is_refused_after_keeping_the_table_in_step(decoding):
    decoder = Decoder()
    with pytest.raises(HeaderListTooLarge, match="header list of 180 octets, above the limit of 100") as refused:
        decoder.decode(bytes.fromhex(_C3[0]), max_list_bytes=100)  # 42 + 43 + 38 + 57: above from the third
    assert isinstance(refused.value, HpackError)
    assert decoder.dynamic_table == [(":authority", "www.example.com")]  # the fourth field was still indexed
    assert decoder.decode(bytes.fromhex(_C3[1])) == _REQUEST_HEADERS[1]  # the next block reads on
    second = []
    for limit in (233, 232):  # C.3.2's list is 42 + 43 + 38 + 57 + 53 octets
        decoder = Decoder()
        decoder.decode(bytes.fromhex(_C3[0]))
        second.append(_outcome_of(decoder.decode, bytes.fromhex(_C3[1]), limit))
    assert second == [("ok", _REQUEST_HEADERS[1]),
                      ("HeaderListTooLarge", "header list of 233 octets, above the limit of 232")]
    with pytest.raises(HeaderListTooLarge):
        Decoder().decode(Encoder().encode([("x-big", "v" * 70000)]))  # the default: 64 KiB


def test_an_oversized_list_still_applies_its_size_updates_and_evictions(decoding):
    decoder = Decoder(max_table_size=100)
    decoder.decode(b"\x40\x01a\x0a" + b"1" * 10)  # 43 octets
    block = (b"\x3f\x2d"  # capacity 76 (31 + 45)
             + b"\x40\x01b\x0a" + b"2" * 10 + b"\x40\x01c\x0a" + b"3" * 10)  # each evicts the one before
    with pytest.raises(HeaderListTooLarge, match="header list of 86 octets, above the limit of 50"):
        decoder.decode(block, max_list_bytes=50)
    assert decoder.dynamic_table == [("c", "3" * 10)]
    assert (decoder.table_size, decoder.table_capacity) == (43, 76)
    assert decoder.decode(b"\xbe", max_list_bytes=43) == [("c", "3" * 10)]
    with pytest.raises(HeaderListTooLarge, match="header list of 43 octets, above the limit of -1"):
        decoder.decode(b"\xbe", max_list_bytes=-1)
    with pytest.raises(HeaderListTooLarge, match="header list of 0 octets, above the limit of -1"):
        decoder.decode(b"", max_list_bytes=-1)  # as Python counts: nothing is above -1 too


# The dynamic table: eviction (section 4.4), the tables' own objects returned, buffers.


def test_adding_evicts_the_oldest_entries_until_the_new_one_fits(decoding):
    decoder = Decoder(max_table_size=120)
    decoder.decode(b"\x40\x01a\x0a" + b"1" * 10)  # 43 octets
    decoder.decode(b"\x40\x01b\x0a" + b"2" * 10)  # 43
    assert decoder.decode(b"\x40\x01c\x013") == [("c", "3")]  # 34: 120 exactly, nothing evicted
    assert decoder.table_size == 120 and len(decoder.dynamic_table) == 3
    decoder.decode(b"\x40\x01d\x00")  # 33: the oldest goes
    assert decoder.dynamic_table == [("d", ""), ("c", "3"), ("b", "2" * 10)] and decoder.table_size == 110
    decoder.decode(b"\x40\x01e" + string(b"5" * 50, False))  # 83: the two oldest go
    assert decoder.dynamic_table == [("e", "5" * 50), ("d", "")] and decoder.table_size == 116
    assert decoder.decode(b"\xbf\xbe") == [("d", ""), ("e", "5" * 50)]
    with pytest.raises(HpackError, match="index 64 beyond the tables \\(61 static, 2 dynamic entries\\)"):
        decoder.decode(b"\xc0")


def test_a_new_entry_may_take_its_name_from_the_entry_it_evicts(decoding):
    """Section 4.4: the name is read before the eviction the entry causes."""
    decoder = Decoder(max_table_size=60)
    decoder.decode(b"\x40\x03abc\x0a" + b"x" * 10)  # 45 octets
    name = decoder.dynamic_table[0][0]
    assert decoder.decode(b"\x7e\x0a" + b"y" * 10) == [("abc", "y" * 10)]  # index 62: abc
    assert decoder.dynamic_table == [("abc", "y" * 10)] and decoder.table_size == 45
    assert decoder.dynamic_table[0][0] is name


def test_indexed_fields_are_the_tables_own_objects(decoding):
    decoder = Decoder()
    decoder.decode(bytes.fromhex(_C3[0]))  # (":authority", "www.example.com") at 62
    headers = decoder.decode(b"\x82\xbe\x04\x01x\x0f\x2f\x01v\x40\x01k\x01v")
    assert headers == [(":method", "GET"), (":authority", "www.example.com"), (":path", "x"),
                       (":authority", "v"), ("k", "v")]
    assert headers[0] is hpack.STATIC_TABLE[1]  # no allocation for an indexed field
    assert headers[1] is decoder.dynamic_table[1]
    assert headers[2][0] is hpack.STATIC_TABLE[3][0]  # a literal's indexed name
    assert headers[3][0] is decoder.dynamic_table[1][0]
    assert headers[4] is decoder.dynamic_table[0]  # the same tuple in the list and the table
    assert all(type(text) is str for field in headers for text in field)


def test_any_buffer_and_none_of_its_octets_beyond_it(decoding):
    raw = bytes.fromhex(_C4[0])
    for block in (raw, bytearray(raw), memoryview(raw), memoryview(raw + b"\x80\xbe")[:len(raw)],
                  memoryview(b"\x80" + raw)[1:]):
        assert Decoder().decode(block) == _REQUEST_HEADERS[0]
    with pytest.raises(HpackError, match="string literal of 12 octets runs past"):
        Decoder().decode(memoryview(raw)[:-1])  # the Huffman-coded :authority cut short
    assert Decoder().decode(b"") == Decoder().decode(bytearray()) == []
    with pytest.raises(TypeError):
        Decoder().decode("\x82")  # not a buffer


def test_latin_1_text_raw_and_huffman_coded(decoding):
    every = bytes(range(256))
    block = b"\x00" + string(every, False) + string(every, True) + b"\x00" + string(every, True) + string(b"", True)
    assert Decoder().decode(block) == [(every.decode("latin-1"),) * 2, (every.decode("latin-1"), "")]


# Both decoders against each other.


def _outcome_and_table(decode, decoder, block, max_list_bytes):
    try:
        outcome = "ok", decode(decoder, block, max_list_bytes)
    except HpackError as exc:
        outcome = type(exc).__name__, str(exc)
    return outcome, (decoder.dynamic_table, decoder.table_size, decoder.table_capacity)


_FUZZ_NAMES = [b"x-mq-request-id", b"x-mq-date-time", b"grpc-timeout", b"content-type", b":path", b"k", b""]


def _fuzz_block(rng: random.Random, table_length: int, limit: int) -> bytes:
    """A block as an encoder might write it, with every representation, now and then an index
    beyond the tables or a size update above the limit."""
    out = bytearray()
    if rng.random() < 0.25:  # size updates, at the start
        for _ in range(rng.randrange(1, 3)):
            out += integer(rng.choice([0, limit // 2, limit, limit + 1, rng.randrange(6000)]), 5, 0x20)
    for _ in range(rng.randrange(9)):
        kind = rng.randrange(5)
        if kind == 0:
            out += integer(rng.randrange(64 + table_length), 7, 0x80)  # index 0 now and then
            continue
        flags, prefix = ((0x40, 6), (0x40, 6), (0x00, 4), (0x10, 4))[kind - 1]
        if rng.random() < 0.5:
            out += integer(rng.randrange(1, 63 + table_length), prefix, flags)
        else:
            out += integer(0, prefix, flags) + string(rng.choice(_FUZZ_NAMES), rng.random() < 0.5)
        value = rng.randbytes(rng.choice([0, 1, 8, 36, 130, 300]) if rng.random() < 0.3 else rng.randrange(40))
        out += string(value, rng.random() < 0.5)
        table_length += flags == 0x40
    return bytes(out)


def _mutate(rng: random.Random, block: bytes) -> bytes:
    data = bytearray(block)
    mutation = rng.randrange(5)
    if mutation == 0 and data:  # an octet changed
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif mutation == 1 and data:  # a bit flipped
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif mutation == 2:  # cut short
        del data[rng.randrange(len(data) + 1):]
    elif mutation == 3:  # octets inserted
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randrange(1, 4))
    else:  # garbage
        data = bytearray(rng.randbytes(rng.randrange(1, 24)))
    return bytes(data)


def test_both_decoders_agree_on_random_and_mutated_blocks(both):
    """2 000 blocks on connections of 20 blocks each: the same header list or the same error,
    and the same dynamic table after it, whichever way the block ended."""
    py_decode, c_decode = both
    rng = random.Random(7541)
    kinds = Counter()
    for case in range(2000):
        if case % 20 == 0:
            limit = rng.choice([0, 64, 256, 4096])
            py, c = Decoder(limit), Decoder(limit)
        block = _fuzz_block(rng, len(py.dynamic_table), limit)
        if rng.random() < 0.5:
            block = _mutate(rng, block)
        max_list_bytes = rng.choice([65536, 65536, 65536, 400, 100, 0])
        expected = _outcome_and_table(py_decode, py, block, max_list_bytes)
        assert _outcome_and_table(c_decode, c, block, max_list_bytes) == expected, (case, block.hex())
        (kind, detail), _ = expected
        kinds[kind if kind != "HpackError" else " ".join(word for word in detail.split()[:4] if not word.isdigit())] += 1
    assert kinds["ok"] > 400 and kinds["HeaderListTooLarge"] > 50
    assert len(kinds) >= 10, kinds  # most errors


# The compiled decoder's reference counts and memory.


def _leak_cases() -> list[tuple[bytes, int]]:
    long_value = bytes(range(256)) * 2
    blocks = [bytes.fromhex(block) for block in _C3 + _C4 + _C5 + _C6]
    blocks += [block for block, _ in _MALFORMED + _TRUNCATED]
    blocks += [
        b"\x40\x01k" + string(long_value, True),  # a Huffman string decoded in a PyMem buffer
        b"\x00\x01k" + string(long_value, True)[:-1] + b"\x00",  # the same, its padding wrong
        b"\x04\x05ab",  # a static name taken, the value past the end
        b"\x40\x01k\x01v\x7e\x05ab",  # a dynamic name taken, the value past the end
        b"\x40\x01k\x01v\x00\x01n\x05ab",  # a literal name read, the value past the end
        b"\x82\xbe\x86\x80",  # fields in the list, then index 0
        b"\x3f\xe1\x1f\x20\x40\x01k\x01v\x30",  # size updates, an entry added, a late update
        Encoder().encode([("x-big", "v" * 600), (":method", "GET")]),  # too large for the 100 below
    ]
    return [(block, limit) for block in blocks for limit in (65536, 100)]


def test_the_compiled_decoder_keeps_reference_counts_and_memory_steady():
    module = compiled()
    cases = _leak_cases()

    def run():
        decoder = Decoder(max_table_size=256)
        for block, limit in cases:
            try:
                module.decode_block(decoder, block, limit)
            except HpackError:
                pass

    shared = [hpack.STATIC_TABLE[1], hpack.STATIC_TABLE[3], hpack.STATIC_TABLE[3][0], hpack.STATIC_TABLE[0][0],
              hpack.STATIC_TABLE[7]]
    run()
    run()
    before = [sys.getrefcount(item) for item in shared]
    tracemalloc.start()
    try:
        run()
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            run()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(item) for item in shared] == before
    assert grown < 2048, f"{grown} octets more after 200 runs of {len(cases)} blocks"  # a leak: 200 x something
