"""Fuzz targets: every decoder that reads bytes a peer (or a disk) hands us.

Each target takes one input and checks the decoder's contract: it either returns a value
that survives re-encoding, or raises the one documented error type. Anything else (another
exception, RecursionError, MemoryError, a hang) is a bug. The targets are plain functions
so that regression inputs replay under pytest without the fuzzing engine; ``fuzz.engine``
runs them under atheris, ``fuzz.run`` drives the engine and reports.

``seeds(name)`` gives each target well-formed inputs built by our own encoders, so the
fuzzer starts from the real formats instead of discovering them byte by byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterable

from ferrymq.acl.access_validator import AccessDenied, AccessValidator
from ferrymq.acl.plain_acl import parse_acl
from ferrymq.acl.signature import Credentials, sign_request
from ferrymq.common import rocketmq_json
from ferrymq.common.message import (
    Message,
    MessageExt,
    SysFlag,
    check_record,
    decode_batch_body,
    decode_properties,
    decode_record,
    decode_records,
    decode_run,
    py_decode_batch_body,
    py_decode_run,
    py_decode_properties,
    py_encode_properties,
    encode_batch_body,
    encode_properties,
    encode_record,
)
from ferrymq.common.message_id import decode_offset_msg_id, offset_msg_id
from ferrymq.filter.sql92 import SqlError, compile_selector
from ferrymq.grpc.hpack import Decoder, Encoder, HpackError, huffman_decode, py_huffman_decode
from ferrymq.common.protocol import ConsumerData, HeartbeatData, ProducerData, SubscriptionData
from ferrymq.client.pull_service import accept
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, SerializeType, encode_frame
from ferrymq.remoting.errors import FrameError, HeaderDecodeError, HeaderFieldError
from ferrymq.remoting.json_header import decode_json_header, decode_json_header_bytes, encode_json_header
from ferrymq.remoting.request_headers import PullMessageHeader, SendMessageHeader
from ferrymq.remoting.rocketmq_header import decode_rocketmq_header, encode_rocketmq_header

__all__ = ["TARGETS", "Target", "seeds"]

MAX_FRAME = 64 * 1024  # small, so the fuzzer reaches the limit checks


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]
    seeds: Callable[[], Iterable[bytes]]
    what: str


# ------------------------------------------------------------------ remoting


def _same_command(a: RemotingCommand, b: RemotingCommand) -> bool:
    return (a.code, a.language, a.version, a.opaque, a.flag, a.remark, a.ext_fields, a.body, a.serialize_type) == (
        b.code, b.language, b.version, b.opaque, b.flag, b.remark, b.ext_fields, b.body, b.serialize_type)  # fmt: skip


def frames(data: bytes) -> None:
    """The connection's stream decoder, fed in two chunks; every decoded command re-encodes
    to a frame that decodes to the same command."""
    if not data:
        return
    cut = data[0] % (len(data) + 1)
    decoder = FrameDecoder(MAX_FRAME)
    commands: list[RemotingCommand] = []
    try:
        commands += decoder.feed(data[1:cut])
        commands += decoder.feed(data[cut:])
    except FrameError:
        pass
    for cmd in commands:
        try:
            frame = encode_frame(cmd)
        except FrameError:
            continue  # a value Java could not hold either (code beyond int32...)
        again = FrameDecoder(len(frame) + 1).feed(frame)
        assert len(again) == 1 and _same_command(again[0], cmd), (cmd, again)


def _header_roundtrip(decode: Callable, encode: Callable, raw) -> None:
    try:
        fields = decode(raw)
    except HeaderDecodeError:
        return
    try:
        encoded = encode(fields)
    except (struct.error, UnicodeEncodeError, OverflowError, ValueError):
        return  # not representable on the wire; encode_frame turns these into FrameError
    if isinstance(raw, str):
        encoded = encoded.decode("utf-8")
    assert decode(encoded) == fields, (fields, encoded)


def _outcome(fn: Callable, arg) -> object:
    """What ``fn(arg)`` answers, a refusal (the decode errors of our codecs) included."""
    try:
        return fn(arg)
    except (ValueError, HeaderDecodeError, HpackError) as exc:
        return "refused", type(exc).__name__, str(exc)


def json_header(data: bytes) -> None:
    """The JSON header serialization (what Java clients send by default); the compiled
    decoder of raw header bytes, where built, answers exactly as the Python one."""
    text = data.decode("utf-8", "replace")
    _header_roundtrip(decode_json_header, encode_json_header, text)
    assert _outcome(decode_json_header_bytes, data) == _outcome(decode_json_header, text), data


def rocketmq_header(data: bytes) -> None:
    """The binary ROCKETMQ header serialization."""
    _header_roundtrip(decode_rocketmq_header, encode_rocketmq_header, data)


def _ext_fields(data: bytes) -> dict[str, str]:
    """Ext fields from fuzz bytes: ``key=value`` lines."""
    out = {}
    for line in data.decode("utf-8", "replace").split("\n"):
        key, _, value = line.partition("=")
        out[key] = value
    return out


def request_headers(data: bytes) -> None:
    """The typed SEND/PULL header readers on arbitrary ext fields."""
    ext = _ext_fields(data)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.PULL_MESSAGE):
        req = RemotingCommand.request(code, ext)
        try:
            header = (PullMessageHeader if code == RequestCode.PULL_MESSAGE else SendMessageHeader).from_request(req)
        except HeaderFieldError:
            continue
        fields = header.to_fields() if code == RequestCode.PULL_MESSAGE else header.to_fields(v2=code != RequestCode.SEND_MESSAGE)
        again = type(header).from_request(RemotingCommand.request(code, fields))
        assert again == header, (header, again)


_ACL_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
              RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT, RequestCode.CONSUMER_SEND_MSG_BACK,
              RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.QUERY_MESSAGE)
_ACL = parse_acl({"globalWhiteRemoteAddresses": ["10.1.*"], "accounts": [
    {"accessKey": "fuzzer01", "secretKey": "fuzz-secret", "topicPerms": ["orders=PUB|SUB"], "groupPerms": ["g=SUB"]},
    {"accessKey": "trusted1", "secretKey": "other-secret", "whiteRemoteAddress": "10.9.9.{1,2}", "admin": True}]})
_ACL_CHECK = AccessValidator(lambda: _ACL)


def acl_requests(data: bytes) -> None:
    """The ACL check on requests with arbitrary (missing, repeated, huge, forged) AccessKey,
    Signature and header fields: allowed or AccessDenied, nothing else."""
    if len(data) < 2:
        return
    head, _, body = data[2:].partition(b"\n\n")
    request = RemotingCommand.request(_ACL_CODES[data[0] % len(_ACL_CODES)], _ext_fields(head), body=body or None)
    if data[1] & 1:
        sign_request(request, Credentials("fuzzer01", "fuzz-secret"))
    host = ("127.0.0.1", "10.1.2.3", "10.9.9.2", "::1", "bogus")[data[1] % 5]
    try:
        _ACL_CHECK.check(request, host)
    except AccessDenied:
        pass


# ------------------------------------------------------------------ records and bodies


def _record_roundtrip(m: MessageExt) -> None:
    try:
        again = decode_records(bytes(encode_record(m)))
    except ValueError:
        return  # e.g. a topic longer than a record can say
    assert len(again) == 1
    a, b = again[0], m
    assert (a.topic, a.body, a.properties, a.queue_id, a.flag, a.sys_flag, a.born_host, a.store_host) == (
        b.topic, b.body, b.properties, b.queue_id, b.flag, b.sys_flag, b.born_host, b.store_host), (a, b)  # fmt: skip


def records(data: bytes) -> None:
    """CommitLog records and pull bodies (back-to-back records), as a consumer reads them:
    decode, the recovery walk's cheap check, then the client's inflate and tag filter; the
    compiled run decoder, where built, answers as the Python one."""
    if not data:
        return
    check_crc = bool(data[0] & 1)
    body = data[1:]
    assert decode_run(body, 0, len(body)) == py_decode_run(body, 0, len(body)), body
    size = check_record(body, 0, check_crc=check_crc)
    if size > 0:  # what recovery keeps, the reader must read
        first, end = decode_record(body, 0, check_crc=check_crc)
        assert end == size == first.store_size, (size, end, first.store_size)
    try:
        messages = decode_records(body, check_crc=check_crc)
    except ValueError:
        return
    if not messages:
        return
    for m in messages:
        _record_roundtrip(m)
    accept(messages, SubscriptionData(topic=messages[0].topic, sub_string="*"), 0, 0)


def batch_body(data: bytes) -> None:
    """SEND_BATCH_MESSAGE bodies; the compiled decoder, where built, answers as the Python one."""
    assert _outcome(decode_batch_body, data) == _outcome(py_decode_batch_body, data), data
    try:
        elements = decode_batch_body(data)
    except ValueError:
        return
    msgs = [Message(topic="T", body=body, flag=flag, properties=props) for flag, body, props in elements]
    try:
        encoded = encode_batch_body(msgs)
    except ValueError:
        return
    assert decode_batch_body(encoded) == elements


def properties(data: bytes) -> None:
    """The 0x01/0x02 property string: total (never raises) and stable after one pass; the
    compiled codec, where built, answers as the Python one."""
    text = data.decode("utf-8", "replace")
    props = decode_properties(text)
    assert props == py_decode_properties(text)
    assert encode_properties(props) == py_encode_properties(props)
    assert decode_properties(encode_properties(props)) == props


def message_ids(data: bytes) -> None:
    """Offset msgIds typed by users (query by id)."""
    text = data.decode("utf-8", "replace")
    try:
        host, port, offset = decode_offset_msg_id(text)
    except ValueError:
        return
    assert offset_msg_id(host, port, offset) == text.upper() or offset < 0


def json_bodies(data: bytes) -> None:
    """fastjson-flavoured bodies (heartbeats, routes, offset tables) through the tolerant parser."""
    try:
        value = rocketmq_json.loads(data)
    except ValueError:
        return
    assert rocketmq_json.loads(rocketmq_json.dumps(value)) == value


def heartbeats(data: bytes) -> None:
    """HEART_BEAT bodies into the typed model the broker keeps."""
    try:
        HeartbeatData.from_json(data)
    except ValueError:
        pass


def sql92(data: bytes) -> None:
    """A consumer's SQL92 selector (first line) evaluated on message properties (the rest,
    ``key=value`` lines): compiling raises only SqlError, evaluating never raises."""
    sql, _, rest = data.decode("utf-8", "replace").partition("\n")
    try:
        selector = compile_selector(sql)
    except SqlError:
        return
    props = dict(line.partition("=")[::2] for line in rest.split("\n") if line)
    assert selector.evaluate(props) in (True, False, None)
    assert selector.matches(props) is (selector.evaluate(props) is True)


# ------------------------------------------------------------------ gRPC


def _table(decoder: Decoder) -> tuple[object, ...]:
    return decoder.dynamic_table, decoder.table_size, decoder.table_capacity


def hpack(data: bytes) -> None:
    """HTTP/2 header blocks a gRPC client sends: two blocks in a row through one decoding context
    (the dynamic table carries over). The compiled decoder, where built, answers every block as
    the Python one does (the same header list or the same refusal) and leaves the same dynamic
    table; a decoded list that the stateless encoder can write decodes back to itself; the
    compiled Huffman decoder agrees with the Python one on the input itself."""
    if len(data) < 2:
        return
    max_list_bytes = 64 + data[0] * 256  # small limits too, so HeaderListTooLarge is reached
    cut = 2 + data[1] % (len(data) - 1)
    compiled, python = Decoder(max_table_size=4096), Decoder(max_table_size=4096)
    for block in (data[2:cut], data[cut:]):
        answer = _outcome(lambda b: compiled.decode(b, max_list_bytes), block)
        assert answer == _outcome(lambda b: python.py_decode(b, max_list_bytes), block), block
        assert _table(compiled) == _table(python), block
        if isinstance(answer, list) and all(name == name.lower() for name, _ in answer):
            assert Decoder().decode(Encoder().encode(answer), 1 << 30) == answer, answer
    assert _outcome(huffman_decode, data) == _outcome(py_huffman_decode, data), data


# ------------------------------------------------------------------ seeds


def _sample_commands() -> list[RemotingCommand]:
    send = SendMessageHeader(producer_group="PG", topic="orders", queue_id=1,
                             properties=encode_properties({"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "AB"}))
    pull = PullMessageHeader(consumer_group="CG", topic="orders", queue_id=0, queue_offset=7, subscription="a || b")
    cmds = []
    for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
        cmds.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send.to_fields(v2=True), body=b"hello",
                                            serialize_type=st))
        cmds.append(RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_fields(), serialize_type=st))
        cmds.append(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=_heartbeat().to_json(), serialize_type=st))
        cmds.append(cmds[0].response(0, remark="ok"))
    return cmds


def _heartbeat() -> HeartbeatData:
    sub = SubscriptionData(topic="orders", sub_string="a || b", tags_set=["a", "b"], code_set=[97, 98])
    return HeartbeatData(client_id="127.0.0.1@1", producer_data_set=[ProducerData(group_name="PG")],
                         consumer_data_set=[ConsumerData(group_name="CG", subscription_data_set=[sub])])


def _sample_record(**over) -> bytes:
    fields = dict(topic="orders", body=b"payload", properties={"TAGS": "a", "KEYS": "k"}, queue_id=1,
                  born_host=("127.0.0.1", 5), store_host=("127.0.0.1", 10911))
    m = MessageExt(**(fields | over))
    return bytes(encode_record(m))


def _seed_frames() -> Iterable[bytes]:
    for cmd in _sample_commands():
        yield b"\x07" + encode_frame(cmd)
    yield b"\x00" + b"".join(encode_frame(c) for c in _sample_commands())


def _seed_headers(serialize_type: SerializeType) -> Iterable[bytes]:
    encode = encode_json_header if serialize_type == SerializeType.JSON else encode_rocketmq_header
    for cmd in _sample_commands():
        yield encode((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields))


def _seed_request_headers() -> Iterable[bytes]:
    for cmd in _sample_commands()[:2]:
        yield "\n".join(f"{k}={v}" for k, v in cmd.ext_fields.items()).encode()


def _seed_acl_requests() -> Iterable[bytes]:
    for i, cmd in enumerate(_sample_commands()[:3]):
        fields = "\n".join(f"{k}={v}" for k, v in cmd.ext_fields.items()).encode()
        yield bytes([i, 1]) + fields + b"\n\n" + (cmd.body or b"")
    yield bytes([0, 0]) + b"AccessKey=fuzzer01\nSignature=AAAA\nb=orders\n\nbody"


def _seed_records() -> Iterable[bytes]:
    import zlib

    yield b"\x01" + _sample_record()
    yield b"\x00" + _sample_record() + _sample_record(sys_flag=SysFlag.BORNHOST_V6)
    yield b"\x00" + _sample_record(sys_flag=SysFlag.COMPRESSED, body=zlib.compress(b"x" * 100))


def _seed_batches() -> Iterable[bytes]:
    yield encode_batch_body([Message(topic="T", body=b"one", properties={"TAGS": "a"}),
                             Message(topic="T", body=b"two", properties={"KEYS": "k"})])


def _seed_sql() -> Iterable[bytes]:
    yield b"a > 5 AND b = 'x' OR c IS NOT NULL\na=7\nb=x"
    yield b"(a BETWEEN 1 AND 10) AND b NOT IN ('p', 'q') AND NOT (d <> TRUE)\na=3\nb=r\nd=true"
    yield b"a >= -1.5e3 OR a < 0.25 OR b IS NULL\na=12"


def _seed_json() -> Iterable[bytes]:
    yield _heartbeat().to_json()
    yield b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5},"table":{0:"127.0.0.1:10911"}}'


def _seed_hpack() -> Iterable[bytes]:
    request = [(":method", "POST"), (":scheme", "http"),
               (":path", "/apache.rocketmq.v2.MessagingService/SendMessage"), (":authority", "127.0.0.1:8081"),
               ("content-type", "application/grpc"), ("te", "trailers"), ("x-mq-client-id", "host@1234@1@abc"),
               ("grpc-timeout", "3000m")]
    block = Encoder().encode(request)
    yield bytes([16, len(block)]) + block + block
    # (the second byte: where the first block ends) literals with incremental indexing (0x40)
    # twice, then the entries they added (62 and 63)
    literal = bytes([0x40, 3]) + b"abc" + bytes([3]) + b"xyz"
    yield bytes([1, len(literal) * 2]) + literal * 2 + bytes([0x80 | 62, 0x80 | 63])
    # a table size update, then a Huffman-coded value ("www.example.com", RFC 7541 C.4.1)
    yield bytes([2, 3]) + bytes([0x3F, 0xE1, 0x1F]) + bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("frames", frames, _seed_frames, "remoting frame stream decoder"),
        Target("json_header", json_header, lambda: _seed_headers(SerializeType.JSON), "JSON header"),
        Target("rocketmq_header", rocketmq_header, lambda: _seed_headers(SerializeType.ROCKETMQ), "ROCKETMQ header"),
        Target("request_headers", request_headers, _seed_request_headers, "SEND/PULL header fields"),
        Target("acl_requests", acl_requests, _seed_acl_requests, "ACL check of request fields"),
        Target("records", records, _seed_records, "CommitLog records, pull bodies"),
        Target("batch_body", batch_body, _seed_batches, "SEND_BATCH_MESSAGE body"),
        Target("properties", properties, lambda: [b"TAGS\x01a\x02KEYS\x01k1 k2\x02"], "message properties"),
        Target("message_ids", message_ids, lambda: [offset_msg_id("127.0.0.1", 10911, 4096).encode()], "offset msgId"),
        Target("json_bodies", json_bodies, _seed_json, "fastjson bodies"),
        Target("heartbeats", heartbeats, lambda: [_heartbeat().to_json()], "HEART_BEAT body model"),
        Target("sql92", sql92, _seed_sql, "SQL92 selector compile and evaluate"),
        Target("hpack", hpack, _seed_hpack, "HTTP/2 header blocks (gRPC), compiled against Python"),
    )
}


def seeds(name: str) -> list[bytes]:
    return list(TARGETS[name].seeds())
