"""The message model and its one byte encoding (docs/wire-format.md#commitlog-record).

A CommitLog record, a pull/view/query body element and what the Java client decodes
are the same bytes, so this module is the single place they are written and read:
the store persists them, the broker ships them untouched, the client decodes them. (One
module of some 460 lines on purpose: the model, its properties and the record layout change
together.)

Record layout (big-endian), offsets for IPv4 hosts:

    0 TOTALSIZE i32 | 4 MAGIC i32 | 8 BODYCRC i32 | 12 QUEUEID i32 | 16 FLAG i32
    20 QUEUEOFFSET i64 | 28 PHYSICALOFFSET i64 | 36 SYSFLAG i32 | 40 BORNTIMESTAMP i64
    48 BORNHOST (4|16 ip + i32 port) | STORETIMESTAMP i64 | STOREHOST (4|16 ip + i32 port)
    RECONSUMETIMES i32 | PREPAREDTXOFFSET i64 | BODY i32 len + bytes
    TOPIC u8 len + bytes | PROPERTIES i16 len + bytes
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ferrymq.common.message_id import offset_msg_id, offset_msg_id_prefix, pack_ip, unpack_ip
from ferrymq.common import speedups
from ferrymq.common.crc import crc32

_native = speedups.load("ferrymq.common._message_codec")

MESSAGE_MAGIC = -626843481  # 0xDAA320A7
BLANK_MAGIC = -875286124  # 0xCBD43194: filler at the end of a CommitLog segment

MAX_TOPIC_LENGTH = 127  # the record stores the topic length in one signed byte
MAX_GROUP_LENGTH = 255
MAX_PROPERTIES_LENGTH = 32767  # the record stores the properties length as an i16

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class Prop:
    """Well-known property names (Java MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    TRACE_CONTEXT = "TRACE_CONTEXT"  # RocketMQ 5's SystemProperties.trace_context, as stored
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    # RocketMQ 5 timers (docs/timers.md): what a client asks, and the due time the broker keeps
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # a recall marker: the timer it cancels (docs/timers.md#recall)
    # set on the copies the timer stores when a message fires or is rolled, as Apache 5 sets them
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TTL = "TTL"
    ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    CLUSTER = "CLUSTER"
    MSG_TYPE = "MSG_TYPE"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    START_DELIVER_TIME = "__STARTDELIVERTIME"


class SysFlag:
    """Record sysFlag bits (docs/wire-format.md#sysflag-bits)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

    @staticmethod
    def transaction_type(sys_flag: int) -> int:
        return sys_flag & SysFlag.TRANSACTION_MASK

    @staticmethod
    def is_dispatched(sys_flag: int) -> bool:
        """Prepared and rollback records never reach a ConsumeQueue."""
        return sys_flag & SysFlag.TRANSACTION_MASK in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


# ---------------------------------------------------------------- properties


def py_encode_properties(props: Mapping[str, str]) -> str:
    """``name 0x01 value 0x02 ...`` without the trailing 0x02 (4.9.1+ style)."""
    return PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, props.items()))


def py_decode_properties(s: str) -> dict[str, str]:
    """Inverse of encode_properties; accepts 4.9.0's trailing 0x02, drops empty names/values."""
    out: dict[str, str] = {}
    if not s:
        return out
    for item in s.split(PROPERTY_SEPARATOR):
        name, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            out[name] = value
    return out


if _native is not None:
    _native_encode_properties = _native.encode_properties

    def encode_properties(props: Mapping[str, str]) -> str:
        """``name 0x01 value 0x02 ...`` without the trailing 0x02 (4.9.1+ style)."""
        text = _native_encode_properties(props)
        return py_encode_properties(props) if text is NotImplemented else text

    decode_properties = _native.decode_properties
else:
    encode_properties, decode_properties = py_encode_properties, py_decode_properties


# ---------------------------------------------------------------- model


class _PropertyField:
    """A Message attribute that lives in its properties (TAGS, UNIQ_KEY); None or "" removes it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Message | None, owner: type | None = None) -> str | None:
        return self if obj is None else obj.properties.get(self.name)  # type: ignore[return-value]

    def __set__(self, obj: Message, value: str | None) -> None:
        obj._put(self.name, value)


@dataclass(slots=True)
class Message:
    """What a producer sends: topic, body, user flag and string properties."""

    topic: str
    body: bytes
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    tags = _PropertyField(Prop.TAGS)
    uniq_key = _PropertyField(Prop.UNIQ_KEY)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(Prop.KEYS, "").split(" ") if k]

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        self._put(Prop.KEYS, value if value is None or isinstance(value, str) else " ".join(value))

    @property
    def delay_level(self) -> int:
        try:
            return int(self.properties.get(Prop.DELAY, 0))
        except ValueError:
            return 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self._put(Prop.DELAY, str(level) if level > 0 else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        """WAIT: answer only after the store (and, with SYNC_FLUSH, the disk) has it. Default true."""
        return self.properties.get(Prop.WAIT) != "false"

    def _put(self, name: str, value: str | None) -> None:
        if value:
            self.properties[name] = value
        else:
            self.properties.pop(name, None)


_DEFAULT_HOST = ("127.0.0.1", 0)


@dataclass(slots=True)
class MessageExt(Message):
    """A message as stored: the record's header fields on top of Message."""

    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = _DEFAULT_HOST
    store_timestamp: int = 0
    store_host: tuple[str, int] = _DEFAULT_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    store_size: int = 0

    @property
    def msg_id(self) -> str:
        """The offset msgId: where this record lives. A record from a peer with a negative
        offset (corrupt) still gets an id, as Java's putLong writes it, rather than failing."""
        if self.commit_log_offset < 0:
            return offset_msg_id_prefix(*self.store_host) + f"{self.commit_log_offset & 0xFFFF_FFFF_FFFF_FFFF:016X}"
        return offset_msg_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def client_msg_id(self) -> str:
        """What Java's MessageExt.getMsgId() returns: UNIQ_KEY when present."""
        return self.properties.get(Prop.UNIQ_KEY) or self.msg_id


# ---------------------------------------------------------------- record codec

_I16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
RECORD_HEADER = struct.Struct(">ii")  # TOTALSIZE, MAGIC: enough to walk a CommitLog
_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET

QUEUE_OFFSET_POS = 20
SYS_FLAG_POS = 36
BORN_HOST_POS = 48


def _fixed_struct(born_ip_len: int, store_ip_len: int) -> struct.Struct:
    """Everything from TOTALSIZE to the BODY length, as one struct call."""
    return struct.Struct(f">iiiiiqqiq{born_ip_len}siq{store_ip_len}siiqi")


FIXED_FIELDS = ("total", "magic", "crc", "queue_id", "flag", "queue_offset", "phys_offset", "sys_flag", "born_ts",
                "born_ip", "born_port", "store_ts", "store_ip", "store_port", "reconsume", "prepared", "body_len")


def fixed_field_positions(born_v6: bool, store_v6: bool) -> dict[str, tuple[int, int]]:
    """Where each fixed field lies in a record, as (position, width), taken from the struct
    the codec packs with: for readers that gather one field of many records at once."""
    fmt = _fixed_struct(16 if born_v6 else 4, 16 if store_v6 else 4).format.lstrip(">")
    positions, pos = {}, 0
    for name, code in zip(FIXED_FIELDS, re.findall(r"\d*[a-z]", fmt), strict=True):
        width = struct.calcsize(">" + code)
        positions[name] = (pos, width)
        pos += width
    return positions


# Keyed by (born host is IPv6, store host is IPv6).
_FIXED = {(b6, s6): _fixed_struct(16 if b6 else 4, 16 if s6 else 4) for b6 in (False, True) for s6 in (False, True)}
MIN_RECORD_SIZE = _FIXED[False, False].size + 1 + 2  # empty body, topic and properties


def _fixed_for(sys_flag: int) -> struct.Struct:
    return _FIXED[bool(sys_flag & SysFlag.BORNHOST_V6), bool(sys_flag & SysFlag.STOREHOST_V6)]


def body_crc(body: bytes) -> int:
    return crc32(body) & 0x7FFFFFFF


def encode_record(m: MessageExt, encoded_properties: bytes | None = None) -> bytearray:
    """One CommitLog record for ``m``.

    Fills in the derived fields of ``m`` (host bits of sys_flag, body_crc, store_size)
    so that ``m`` describes exactly the bytes returned. Returns a fresh bytearray so
    the store can stamp offsets into it without another copy. ``encoded_properties``
    lets a caller that already encoded (and size-checked) the properties pass them in.
    """
    topic = m.topic.encode()
    props = encode_properties(m.properties).encode() if encoded_properties is None else encoded_properties
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic is {len(topic)} bytes, at most {MAX_TOPIC_LENGTH} allowed")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties are {len(props)} bytes, at most {MAX_PROPERTIES_LENGTH} allowed")
    born_ip = pack_ip(m.born_host[0])
    store_ip = pack_ip(m.store_host[0])
    sys_flag = m.sys_flag & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if len(born_ip) == 16:
        sys_flag |= SysFlag.BORNHOST_V6
    if len(store_ip) == 16:
        sys_flag |= SysFlag.STOREHOST_V6
    body = m.body
    crc = crc32(body) & 0x7FFFFFFF
    try:
        buf = pack_record(
            topic, body, props, crc, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset, sys_flag,
            m.born_timestamp, born_ip, m.born_host[1], m.store_timestamp, store_ip, m.store_host[1],
            m.reconsume_times, m.prepared_transaction_offset,
        )  # fmt: skip
    except (struct.error, OverflowError) as exc:
        raise ValueError(f"record field out of range: {exc}") from exc
    m.sys_flag, m.body_crc, m.store_size = sys_flag, crc, len(buf)
    return buf


def py_pack_record(
    topic: bytes, body: bytes, props: bytes, crc: int, queue_id: int, flag: int, queue_offset: int,
    commit_log_offset: int, sys_flag: int, born_timestamp: int, born_ip: bytes, born_port: int,
    store_timestamp: int, store_ip: bytes, store_port: int, reconsume_times: int, prepared_offset: int,
) -> bytearray:  # fmt: skip
    """A record's bytes from its fields (the layout at the top of this module); the IP
    lengths must agree with ``sys_flag``'s host bits, as encode_record sees to."""
    fixed = _FIXED[len(born_ip) == 16, len(store_ip) == 16]
    size = fixed.size
    total = size + len(body) + 1 + len(topic) + 2 + len(props)
    buf = bytearray(total)
    fixed.pack_into(
        buf, 0, total, MESSAGE_MAGIC, crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag,
        born_timestamp, born_ip, born_port, store_timestamp, store_ip, store_port, reconsume_times,
        prepared_offset, len(body),
    )  # fmt: skip
    end = size + len(body)
    buf[size:end] = body
    buf[end] = len(topic)
    end += 1
    buf[end : end + len(topic)] = topic
    end += len(topic)
    _I16.pack_into(buf, end, len(props))
    buf[end + 2 :] = props
    return buf


pack_record = _native.pack_record if _native is not None else py_pack_record


# ---------------------------------------------------------------- a put's run of records
# One call per put for the per-message steps of storing it (a batch of 32 is one call into the
# compiled twins, not 32 trips through the interpreter: bench/RESULTS.md, batch32).


def py_encode_records(msgs: Sequence[MessageExt], store_host: tuple[str, int],
                      max_body_size: int) -> tuple[bytearray, list[int]] | tuple[int, str]:
    """The records of one put's messages back to back, with the offsets and store time the
    messages carry (the store stamps the real ones under its lock: ``stamp_records``), and their
    sizes. Each message gets ``store_host`` and the derived fields of ``encode_record``.

    A message the store refuses stops it there, returned as (its index, what): "body" when its
    body is over ``max_body_size``, "properties" when its encoded properties are over
    MAX_PROPERTIES_LENGTH. A field out of its range raises ValueError, as ``encode_record``."""
    records = []
    for i, m in enumerate(msgs):
        if len(m.body) > max_body_size:
            return i, "body"
        props = encode_properties(m.properties).encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            return i, "properties"
        m.store_host = store_host
        records.append(encode_record(m, props))
    return (records[0] if len(records) == 1 else bytearray().join(records)), [len(r) for r in records]


def py_stamp_records(data: bytearray, sizes: Sequence[int], queue_offset: int, physical_offset: int,
                     store_timestamp: int) -> None:
    """``stamp_record`` for every record of a run written at ``physical_offset``: queue offsets
    from ``queue_offset`` up (a negative one: 0 in every record, not dispatched)."""
    pos = 0
    for i, size in enumerate(sizes):
        if size < BORN_HOST_POS + 28 or pos + size > len(data):
            raise ValueError(f"record {i} of {size} bytes at {pos} does not fit the data")
        stamp_record(data, queue_offset + i if queue_offset >= 0 else 0, physical_offset + pos, store_timestamp, pos)
        pos += size


def py_place_records(msgs: Sequence[MessageExt], sizes: Sequence[int], physical_offset: int, queue_offset: int,
                     store_timestamp: int, id_prefix: str) -> list[str]:
    """A written run's messages learn their CommitLog offset, queue offset (from ``queue_offset``
    up; a negative one: 0) and store time; returns their offset msgIds (``id_prefix``: the store
    host's, ``offset_msg_id_prefix``)."""
    if not id_prefix.isascii():
        raise ValueError("an offset msgId prefix is hex digits")
    ids = []
    for i, (m, size) in enumerate(zip(msgs, sizes)):
        if physical_offset < 0:
            raise ValueError(f"negative physical offset {physical_offset}")
        m.commit_log_offset = physical_offset
        m.queue_offset = queue_offset + i if queue_offset >= 0 else 0
        m.store_timestamp = store_timestamp
        ids.append(f"{id_prefix}{physical_offset:016X}")
        physical_offset += size
    return ids


if _native is not None:
    encode_records, stamp_records, place_records = _native.encode_records, _native.stamp_records, _native.place_records
else:
    encode_records, stamp_records, place_records = py_encode_records, py_stamp_records, py_place_records


def stamp_record(buf: bytearray, queue_offset: int, physical_offset: int, store_timestamp: int, pos: int = 0) -> None:
    """Write the three fields only known under the store's write lock into an encoded record."""
    _OFFSETS.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset, physical_offset)
    _I64.pack_into(buf, store_timestamp_pos(buf, pos), store_timestamp)


def store_timestamp_pos(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """STORETIMESTAMP follows BORNHOST, whose width depends on the sysflag."""
    (sys_flag,) = _I32.unpack_from(buf, pos + SYS_FLAG_POS)
    return pos + BORN_HOST_POS + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8)


def record_store_timestamp(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    return _I64.unpack_from(buf, store_timestamp_pos(buf, pos))[0]


def check_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> int:
    """Cheap validation for recovery walks, without building a MessageExt.

    Returns the record's size if a well-formed message record starts at ``pos`` and
    lies wholly inside ``buf``; 0 if a blank (end-of-segment) record starts there;
    -1 for anything else (zeros, garbage, a torn write).
    """
    if len(buf) - pos < RECORD_HEADER.size:
        return -1
    total, magic = RECORD_HEADER.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return 0
    if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE or pos + total > len(buf):
        return -1
    (sys_flag,) = _I32.unpack_from(buf, pos + SYS_FLAG_POS)
    body_pos = pos + _fixed_for(sys_flag).size
    if body_pos > pos + total:
        return -1
    (body_len,) = _I32.unpack_from(buf, body_pos - 4)
    topic_pos = body_pos + body_len
    if body_len < 0 or topic_pos + 3 > pos + total:
        return -1
    props_pos = topic_pos + 1 + buf[topic_pos]
    if props_pos + 2 > pos + total or props_pos + 2 + _I16.unpack_from(buf, props_pos)[0] != pos + total:
        return -1
    if check_crc:
        (crc,) = _I32.unpack_from(buf, pos + 8)
        if crc32(memoryview(buf)[body_pos:topic_pos]) & 0x7FFFFFFF != crc:
            return -1
    return total


def _decode(buf: bytes | memoryview, pos: int, check_crc: bool) -> tuple[MessageExt, int]:
    # Text fields decode as Java's new String(bytes, UTF_8) does: bad sequences become U+FFFD.
    if len(buf) - pos < BORN_HOST_POS:
        raise ValueError(f"truncated record at {pos}: {len(buf) - pos} bytes left")
    (sys_flag,) = _I32.unpack_from(buf, pos + SYS_FLAG_POS)
    fixed = _fixed_for(sys_flag)
    if len(buf) - pos < fixed.size:
        raise ValueError(f"truncated record at {pos}")
    (
        total, magic, crc, queue_id, flag, queue_offset, phys_offset, _, born_ts,
        born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len,
    ) = fixed.unpack_from(buf, pos)  # fmt: skip
    if magic != MESSAGE_MAGIC:
        raise ValueError(f"bad magic 0x{magic & 0xFFFFFFFF:08X} at {pos}")
    end = pos + total
    if total < MIN_RECORD_SIZE or end > len(buf):
        raise ValueError(f"record at {pos} claims {total} bytes, {len(buf) - pos} available")
    p = pos + fixed.size
    body = buf[p : p + body_len]
    p += body_len
    if body_len < 0 or p >= end:
        raise ValueError(f"bad body length {body_len} in record at {pos}")
    topic_len = buf[p]
    topic = str(buf[p + 1 : p + 1 + topic_len], "utf-8", "replace")
    p += 1 + topic_len
    if p + 2 > end:
        raise ValueError(f"bad topic length {topic_len} in record at {pos}")
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if p + props_len != end:
        raise ValueError(f"record at {pos}: fields add up to {p + props_len - pos} bytes, TOTALSIZE says {total}")
    props = decode_properties(str(buf[p:end], "utf-8", "replace"))
    if type(body) is not bytes:
        body = bytes(body)
    if check_crc and crc32(body) & 0x7FFFFFFF != crc:
        raise ValueError(f"body CRC mismatch in record at {pos}")
    m = MessageExt(
        topic=topic, body=body, flag=flag, properties=props, queue_id=queue_id, queue_offset=queue_offset,
        commit_log_offset=phys_offset, sys_flag=sys_flag, born_timestamp=born_ts,
        born_host=(unpack_ip(born_ip), born_port), store_timestamp=store_ts,
        store_host=(unpack_ip(store_ip), store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body_crc=crc, store_size=total,
    )  # fmt: skip
    return m, end


def _readable(buf: bytes | bytearray | memoryview) -> bytes | memoryview:
    # Slices of a bytearray are bytearrays; go through a memoryview so each field is copied once.
    return memoryview(buf) if isinstance(buf, bytearray) else buf


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> tuple[MessageExt, int]:
    """Decode the record at ``pos``; returns it and the position just after it."""
    return _decode(_readable(buf), pos, check_crc)


def py_decode_run(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> tuple[int, list[MessageExt]]:
    """The message records back to back from ``pos`` that lie wholly before ``limit`` (clamped
    to the buffer), each as ``check_record`` accepts it (no CRC) and ``_decode`` builds it.
    Stops without raising at the first position holding anything else; returns that position
    and the messages before it (the caller tells a torn write from a blank or garbage there)."""
    if pos < 0:
        raise ValueError(f"decode_run() needs a position >= 0, not {pos}")
    data = memoryview(buf)[: max(limit, 0)]  # so that check_record's "wholly inside buf" means "before limit"
    out: list[MessageExt] = []
    while check_record(data, pos) > 0:
        m, pos = _decode(data, pos, False)
        out.append(m)
    return pos, out


decode_run = _native.decode_run if _native is not None else py_decode_run


def decode_records(buf: bytes | bytearray | memoryview, *, check_crc: bool = False) -> list[MessageExt]:
    """Back-to-back records (a pull/query body) until the buffer ends or a blank record."""
    data = _readable(buf)
    n = len(data)
    # decode_run takes the well-formed prefix in one call; what stops it is the end, a blank record,
    # or a malformed one, for which _decode below raises the error it always did.
    out: list[MessageExt]
    pos, out = (0, []) if check_crc else decode_run(data, 0, n)
    while pos < n:
        if n - pos >= RECORD_HEADER.size and RECORD_HEADER.unpack_from(data, pos)[1] == BLANK_MAGIC:
            break
        m, pos = _decode(data, pos, check_crc)
        out.append(m)
    return out


def decompress_body(m: MessageExt) -> bytes:
    """The body as the producer wrote it (ZLIB when sysflag COMPRESSED; type bits 0 mean ZLIB)."""
    return inflate_body(m.body, m.sys_flag)


def inflate_body(body: bytes, sys_flag: int) -> bytes:
    """``body`` as the producer wrote it, given its record's sysflag."""
    if not sys_flag & SysFlag.COMPRESSED:
        return body
    kind = sys_flag & SysFlag.COMPRESSION_TYPE_MASK
    if kind not in (0, SysFlag.COMPRESSION_ZLIB):
        raise ValueError(f"unsupported compression type 0x{kind:X} (only ZLIB is available)")
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise ValueError(f"compressed body cannot be inflated: {exc}") from None


def inflate_in_place(m: MessageExt) -> MessageExt:
    """Replace a compressed body by what the producer wrote and clear the COMPRESSED bit
    (consumers hand messages to users this way, as the Java client does)."""
    if m.sys_flag & SysFlag.COMPRESSED:
        m.body = decompress_body(m)
        m.sys_flag &= ~(SysFlag.COMPRESSED | SysFlag.COMPRESSION_TYPE_MASK)
    return m


# ---------------------------------------------------------------- SEND_BATCH_MESSAGE body

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY length


def encode_batch_body(messages: Iterable[Message]) -> bytes:
    """The body of SEND_BATCH_MESSAGE (docs/wire-format.md#batch-body)."""
    parts: list[bytes] = []
    for m in messages:
        props = encode_properties(m.properties).encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise ValueError(f"properties are {len(props)} bytes, at most {MAX_PROPERTIES_LENGTH} allowed")
        total = _BATCH_HEAD.size + len(m.body) + 2 + len(props)
        parts += (_BATCH_HEAD.pack(total, 0, 0, m.flag, len(m.body)), m.body, _I16.pack(len(props)), props)
    return b"".join(parts)


def py_decode_batch_body(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """SEND_BATCH_MESSAGE body -> [(flag, body, properties)]."""
    out: list[tuple[int, bytes, dict[str, str]]] = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < _BATCH_HEAD.size + 2:
            raise ValueError(f"truncated batch element at {pos}")
        total, _, _, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        p = pos + _BATCH_HEAD.size
        if body_len < 0 or p + body_len + 2 > n:
            raise ValueError(f"bad body length {body_len} in batch element at {pos}")
        element_body = bytes(body[p : p + body_len])
        p += body_len
        (props_len,) = _I16.unpack_from(body, p)
        p += 2
        if total != p + props_len - pos or p + props_len > n:
            raise ValueError(f"batch element at {pos}: fields add up to {p + props_len - pos} bytes, TOTALSIZE says {total}")
        out.append((flag, element_body, py_decode_properties(str(body[p : p + props_len], "utf-8", "replace"))))
        pos = p + props_len
    return out


decode_batch_body = _native.decode_batch_body if _native is not None else py_decode_batch_body


def py_batch_messages(topic: str, body: bytes, extra_properties: dict[str, str], screened: tuple[str, ...],
                      queue_id: int, sys_flag: int, born_timestamp: int, born_host: tuple[str, int],
                      store_host: tuple[str, int], reconsume_times: int) -> tuple[list[MessageExt], bool, bool]:
    """A SEND_BATCH_MESSAGE body's messages (errors as ``decode_batch_body``'s), each element's
    properties updated with ``extra_properties`` and every other field shared; with whether any
    message's properties name one of ``screened``, and whether every message waits (no WAIT
    "false"). The broker's batch send learns both here, so that nothing else walks the messages
    before the store does (bench/RESULTS.md, batch32's profile)."""
    msgs, seen, all_wait = [], False, True
    for flag, element_body, props in py_decode_batch_body(body):
        props.update(extra_properties)
        msgs.append(MessageExt(topic, element_body, flag, props, queue_id, 0, 0, sys_flag, born_timestamp, born_host,
                               0, store_host, reconsume_times))
        seen = seen or any(name in props for name in screened)
        all_wait = all_wait and props.get(Prop.WAIT) != "false"
    return msgs, seen, all_wait


batch_messages = _native.batch_messages if _native is not None else py_batch_messages
