"""Frame and header codec: round trips, hand-written byte vectors, stream splitting, errors."""

from __future__ import annotations

import itertools
import struct

import pytest

from ferrymq.remoting import response_table
from ferrymq.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ferrymq.remoting.command import (
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    HeaderDecodeError,
    HeaderFieldError,
    RemotingCommand,
    encode_frame,
)

JSON, ROCKETMQ = SerializeType.JSON, SerializeType.ROCKETMQ


def decode_one(frame: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> RemotingCommand:
    commands = FrameDecoder(max_frame).feed(frame)
    assert len(commands) == 1
    return commands[0]


def frame_with_header(header: bytes, serialize_type: int, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


SAMPLES = [
    pytest.param(RemotingCommand(RequestCode.SEND_MESSAGE), id="bare"),
    pytest.param(
        RemotingCommand(
            RequestCode.SEND_MESSAGE_V2,
            remark="hello",
            ext_fields={"a": "producerGroup", "b": "TopicTest", "e": "3"},
            body=b"payload",
        ),
        id="remark-ext-body",
    ),
    pytest.param(
        RemotingCommand(
            ResponseCode.SUCCESS,
            flag=1,
            opaque=-5,
            remark="ünïcödé ✓",
            ext_fields={"clé": "värde 日本", "emoji": "🚀"},
            body=bytes(range(256)) * 64,
        ),
        id="unicode-response",
    ),
    pytest.param(
        RemotingCommand(RequestCode.HEART_BEAT, language=LanguageCode.JAVA, version=401, opaque=2**31 - 1, flag=2),
        id="oneway-extremes",
    ),
    pytest.param(RemotingCommand(RequestCode.PULL_MESSAGE, body=b"\x00" * (1 << 20)), id="1MiB-body"),
]


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ], ids=["json", "rocketmq"])
@pytest.mark.parametrize("command", SAMPLES)
def test_round_trip(command: RemotingCommand, serialize_type: SerializeType) -> None:
    command.serialize_type = serialize_type
    decoded = decode_one(encode_frame(command))
    assert decoded == command
    assert decoded.serialize_type is serialize_type


# --- byte vectors worked out by hand from docs/wire-format.md --------------------------------

ROCKETMQ_HEARTBEAT = bytes(
    [
        0x00, 0x00, 0x00, 0x21,  # length 33 = 4 + 29 header + 0 body
        0x01, 0x00, 0x00, 0x1D,  # serialize type ROCKETMQ, header length 29
        0x00, 0x22,  # code 34 (i16)
        0x00,  # language JAVA (u8)
        0x01, 0x97,  # version 407 (i16)
        0x00, 0x00, 0x00, 0x0C,  # opaque 12
        0x00, 0x00, 0x00, 0x00,  # flag 0
        0x00, 0x00, 0x00, 0x00,  # remark length 0
        0x00, 0x00, 0x00, 0x08,  # ext block length 8
        0x00, 0x01, 0x61,  # key length 1 (i16), "a"
        0x00, 0x00, 0x00, 0x01, 0x62,  # value length 1 (i32), "b"
    ]
)  # fmt: skip

ROCKETMQ_RESPONSE = bytes(
    [
        0x00, 0x00, 0x00, 0x1D,  # length 29 = 4 + 23 header + 2 body
        0x01, 0x00, 0x00, 0x17,  # ROCKETMQ, header length 23
        0x00, 0x00,  # code 0 SUCCESS
        0x03,  # language PYTHON
        0x01, 0x91,  # version 401
        0xFF, 0xFF, 0xFF, 0xFF,  # opaque -1 (wrapped)
        0x00, 0x00, 0x00, 0x01,  # flag: response
        0x00, 0x00, 0x00, 0x02, 0x6F, 0x6B,  # remark "ok"
        0x00, 0x00, 0x00, 0x00,  # no ext fields
        0x01, 0x02,  # body
    ]
)  # fmt: skip

# The request header of docs/wire-format.md#json-header (Java 4.9.7 heartbeat), 97 bytes of text.
JSON_HEARTBEAT_TEXT = (
    b'{"code":34,"flag":0,"language":"JAVA","opaque":12,"serializeTypeCurrentRPC":"JSON","version":407}'
)
JSON_HEARTBEAT = b"\x00\x00\x00\x65" + b"\x00\x00\x00\x61" + JSON_HEARTBEAT_TEXT  # length 101, JSON, hdrLen 97


def test_rocketmq_vector_encodes_and_decodes() -> None:
    command = RemotingCommand(
        34, language=LanguageCode.JAVA, version=407, opaque=12, ext_fields={"a": "b"}, serialize_type=ROCKETMQ
    )
    assert encode_frame(command) == ROCKETMQ_HEARTBEAT
    assert decode_one(ROCKETMQ_HEARTBEAT) == command


def test_rocketmq_response_vector() -> None:
    command = RemotingCommand(
        0, language=LanguageCode.PYTHON, version=401, opaque=-1, flag=1, remark="ok", body=b"\x01\x02",
        serialize_type=ROCKETMQ,
    )  # fmt: skip
    assert encode_frame(command) == ROCKETMQ_RESPONSE
    decoded = decode_one(ROCKETMQ_RESPONSE)
    assert decoded == command
    assert decoded.is_response and not decoded.is_oneway


def test_json_example_of_the_wire_facts() -> None:
    assert len(JSON_HEARTBEAT_TEXT) == 0x61
    decoded = decode_one(JSON_HEARTBEAT)
    assert decoded == RemotingCommand(34, language=LanguageCode.JAVA, version=407, opaque=12)
    assert decoded.body is None and decoded.remark is None and decoded.ext_fields == {}
    # and we write exactly what fastjson writes for the same command
    assert encode_frame(decoded) == JSON_HEARTBEAT


def test_json_header_with_ext_and_remark_is_alphabetical_fastjson_style() -> None:
    command = RemotingCommand(
        17, opaque=3, remark="r", ext_fields={"topic": "T", "perm": "6"}, body=b"xyz"
    )
    frame = encode_frame(command)
    header_length = struct.unpack(">I", frame[4:8])[0]
    assert frame[8 : 8 + header_length] == (
        b'{"code":17,"extFields":{"topic":"T","perm":"6"},"flag":0,"language":"PYTHON","opaque":3,'
        b'"remark":"r","serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert frame[8 + header_length :] == b"xyz"


def test_json_header_tolerates_numbers_and_unknown_keys() -> None:
    text = (
        b'{"code":310,"extFields":{"a":"g1","e":3,"m":false,"t":true,"z":1.5,"gone":null},'
        b'"flag":0,"language":0,"opaque":7,"remark":null,"version":401,"unknownKey":[1,2]}'
    )
    decoded = decode_one(frame_with_header(text, JSON))
    assert decoded.language == LanguageCode.JAVA
    assert decoded.ext_fields == {"a": "g1", "e": "3", "m": "false", "t": "true", "z": "1.5"}
    assert decoded.get_int("e") == 3
    assert (decoded.code, decoded.opaque, decoded.version, decoded.remark) == (310, 7, 401, None)


def test_json_header_language_by_name_and_unknown_name() -> None:
    assert decode_one(frame_with_header(b'{"code":1,"language":"GO"}', JSON)).language == LanguageCode.GO
    assert decode_one(frame_with_header(b'{"code":1,"language":"COBOL"}', JSON)).language == LanguageCode.OTHER


def test_rocketmq_never_sends_empty_strings() -> None:
    command = RemotingCommand(10, remark="", ext_fields={"a": "", "b": "x", "": "y"}, serialize_type=ROCKETMQ)
    decoded = decode_one(encode_frame(command))
    assert decoded.remark is None
    assert decoded.ext_fields == {"b": "x"}


def test_rocketmq_zero_length_values_decode_as_absent() -> None:
    ext = b"\x00\x01k\x00\x00\x00\x00" + b"\x00\x01v\x00\x00\x00\x01x"
    header = struct.pack(">hBhiii", 10, 0, 407, 1, 0, 0) + struct.pack(">i", len(ext)) + ext
    assert decode_one(frame_with_header(header, ROCKETMQ)).ext_fields == {"v": "x"}


def test_non_string_ext_values_are_sent_as_java_text() -> None:
    command = RemotingCommand(10, ext_fields={"n": 5, "b": True, "skip": None})  # type: ignore[dict-item]
    for serialize_type in (JSON, ROCKETMQ):
        command.serialize_type = serialize_type
        assert decode_one(encode_frame(command)).ext_fields == {"n": "5", "b": "true"}


# --- stream splitting -------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ], ids=["json", "rocketmq"])
def test_frame_fed_one_byte_at_a_time(serialize_type: SerializeType) -> None:
    command = RemotingCommand(310, remark="é", ext_fields={"k": "v"}, body=b"body", serialize_type=serialize_type)
    decoder = FrameDecoder()
    decoded: list[RemotingCommand] = []
    for byte in encode_frame(command):
        decoded += decoder.feed(bytes([byte]))
    assert decoded == [command]
    assert decoder.buffered == 0


def test_two_frames_in_one_chunk_and_a_split_third() -> None:
    first = RemotingCommand(10, opaque=1, body=b"one")
    second = RemotingCommand(11, opaque=2, serialize_type=ROCKETMQ)
    third = RemotingCommand(12, opaque=3, body=b"three")
    stream = encode_frame(first) + encode_frame(second) + encode_frame(third)
    cut = len(stream) - 5
    decoder = FrameDecoder()
    assert decoder.feed(stream[:cut]) == [first, second]
    assert decoder.buffered == len(encode_frame(third)) - 5
    assert decoder.feed(stream[cut:]) == [third]
    assert decoder.feed(b"") == []


def test_frame_of_exactly_max_size_is_accepted_one_more_byte_is_not() -> None:
    command = RemotingCommand(10, serialize_type=ROCKETMQ)
    header_size = len(encode_frame(command)) - 4
    limit = 4096
    command.body = b"x" * (limit - 4 - header_size)
    frame = encode_frame(command)
    assert len(frame) == limit
    assert decode_one(frame, max_frame=limit).body == command.body
    command.body += b"x"
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(limit).feed(encode_frame(command))


# --- malformed input --------------------------------------------------------------------


def _rocketmq_header(remark_len: int, ext: bytes, ext_len: int | None = None, remark: bytes = b"") -> bytes:
    fixed = struct.pack(">hBhiii", 10, 0, 407, 1, 0, remark_len) + remark
    return fixed + struct.pack(">i", len(ext) if ext_len is None else ext_len) + ext


BAD_FRAMES = [
    pytest.param(b"\x00\x00\x00\x02\x00\x00", FrameError, id="length-below-4"),
    pytest.param(b"\xff\xff\xff\xff", FrameError, id="negative-length"),
    pytest.param(b"\x01\x00\x00\x01", FrameTooLargeError, id="over-max-before-body-arrives"),
    pytest.param(b"\x00\x00\x00\x08\x00\x00\x00\x10abcd", HeaderDecodeError, id="hdrlen-beyond-frame"),
    pytest.param(frame_with_header(b"{not json", JSON), HeaderDecodeError, id="bad-json"),
    pytest.param(frame_with_header(b"[1,2]", JSON), HeaderDecodeError, id="json-not-object"),
    pytest.param(frame_with_header(b'{"code":"x"}', JSON), HeaderDecodeError, id="json-code-not-number"),
    pytest.param(frame_with_header(b"{}", 5), HeaderDecodeError, id="unknown-serialize-type"),
    pytest.param(frame_with_header(b"\x00" * 20, ROCKETMQ), HeaderDecodeError, id="rocketmq-too-short"),
    pytest.param(frame_with_header(_rocketmq_header(1000, b""), ROCKETMQ), HeaderDecodeError, id="remark-too-long"),
    pytest.param(frame_with_header(_rocketmq_header(0, b"", ext_len=50), ROCKETMQ), HeaderDecodeError, id="ext-too-long"),
    pytest.param(
        frame_with_header(_rocketmq_header(0, b"\x00\x05ab"), ROCKETMQ), HeaderDecodeError, id="ext-key-truncated"
    ),
    pytest.param(
        frame_with_header(_rocketmq_header(0, b"\x00\x01a\x00\x00\x00\x09b"), ROCKETMQ),
        HeaderDecodeError,
        id="ext-value-truncated",
    ),
]


@pytest.mark.parametrize("data, error", BAD_FRAMES)
def test_malformed_frames_are_rejected(data: bytes, error: type[Exception]) -> None:
    decoder = FrameDecoder()
    with pytest.raises(error):
        decoder.feed(data)
    # the stream position is lost: the decoder stays failed
    with pytest.raises(FrameError):
        decoder.feed(encode_frame(RemotingCommand(10)))


def test_oversized_header_or_values_cannot_be_encoded() -> None:
    with pytest.raises(FrameError):
        encode_frame(RemotingCommand(10, remark="x" * (1 << 24)))
    with pytest.raises(FrameError):
        encode_frame(RemotingCommand(70000, serialize_type=ROCKETMQ))  # code is an i16 there


# --- RemotingCommand helpers ------------------------------------------------------------


def test_request_converts_values_like_java_to_string() -> None:
    request = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "group", "e": 3, "m": False, "k": True, "l": -(2**40), "code": ResponseCode.TOPIC_NOT_EXIST, "x": None},
        b"body",
        serialize_type=ROCKETMQ,
    )
    assert request.code == 310 and type(request.code) is int
    assert request.ext_fields == {"a": "group", "e": "3", "m": "false", "k": "true", "l": "-1099511627776", "code": "17"}
    assert request.body == b"body" and request.serialize_type is ROCKETMQ
    assert request.language == LanguageCode.PYTHON and request.version == CURRENT_VERSION == 407
    assert not request.is_response and not request.is_oneway


def test_response_mirrors_the_request() -> None:
    request = RemotingCommand.request(10, serialize_type=ROCKETMQ)
    request.opaque = 42
    response = request.response(ResponseCode.TOPIC_NOT_EXIST, "no route", {"queueId": 1}, b"b")
    assert (response.code, response.opaque, response.flag) == (17, 42, 1)
    assert response.is_response and response.serialize_type is ROCKETMQ
    assert (response.remark, response.ext_fields, response.body) == ("no route", {"queueId": "1"}, b"b")
    assert request.response().code == ResponseCode.SUCCESS


def test_typed_header_access() -> None:
    command = RemotingCommand(
        10,
        ext_fields={"i": "-12", "plus": "+7", "big": "9223372036854775807", "t": "TRUE", "f": "yes",
                    "empty": "", "s": "text", "blank": " 1", "under": "1_0"},
    )  # fmt: skip
    assert command.get_int("i") == -12 and command.get_int("plus") == 7
    assert command.get_long("big") == 2**63 - 1
    assert command.get_int("missing", 5) == 5 and command.get_int("missing") is None
    assert command.get_bool("t") is True and command.get_bool("f") is False
    assert command.get_bool("missing") is False and command.get_bool("missing", True) is True
    assert command.get_str("s") == "text"
    assert command.get_str("empty") is None and command.get_str("empty", "d") == "d"
    for name, getter in [("big", command.get_int), ("s", command.get_int), ("blank", command.get_int),
                         ("under", command.get_long)]:  # fmt: skip
        with pytest.raises(HeaderFieldError) as info:
            getter(name)
        assert info.value.field == name and name in str(info.value)
    with pytest.raises(HeaderFieldError, match="<topic>"):
        command.get_str("topic", required=True)
    with pytest.raises(HeaderFieldError, match="<empty>"):
        command.get_int("empty", required=True)
    with pytest.raises(HeaderFieldError):
        command.get_bool("nothing", required=True)


def test_opaque_wraps_into_int32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(response_table, "_opaque_counter", itertools.count(2**31 - 1))
    assert [response_table.next_opaque() for _ in range(3)] == [2**31 - 1, -(2**31), -(2**31) + 1]
    monkeypatch.setattr(response_table, "_opaque_counter", itertools.count(2**32 - 1))
    assert [response_table.next_opaque() for _ in range(2)] == [-1, 0]


def test_codes() -> None:
    assert (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.SEND_MESSAGE_V2) == (10, 11, 310)
    assert (RequestCode.SEND_BATCH_MESSAGE, RequestCode.QUERY_DATA_VERSION, RequestCode.DELETE_EXPIRED_COMMITLOG) == (
        320, 322, 329,
    )  # fmt: skip
    # every code of docs/wire-format.md#request-codes, RocketMQ 5's POP, timer and lite pull codes, 5.3.2's
    # RECALL_MESSAGE, 5.x's GET_ALL_MESSAGE_REQUEST_MODE
    assert len(RequestCode) == 104 and RequestCode.RECALL_MESSAGE == 370 and RequestCode.LITE_PULL_MESSAGE == 361
    assert RequestCode.GET_ALL_MESSAGE_REQUEST_MODE == 402
    assert (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME) == (
        200050, 200051, 200053,
    )  # fmt: skip
    assert ResponseCode.POLLING_FULL == 209 and ResponseCode.POLLING_TIMEOUT == 210  # aliases in RocketMQ 5
    assert [int(c) for c in list(ResponseCode)[:5]] == [0, 1, 2, 3, 4]
    assert ResponseCode.FLOW_CONTROL == 215 and ResponseCode.TRANSACTION_STATE_UNKNOW == 202
    assert len(ResponseCode) == 39 and ResponseCode.INVALID_PARAMETER == 29 and ResponseCode.ILLEGAL_OPERATION == 604
    assert LanguageCode.PYTHON == 3 and LanguageCode.RUST == 12 and len(LanguageCode) == 13
    assert DEFAULT_MAX_FRAME == 16 * 1024 * 1024
