"""RemotingCommand and its frame codec (sans-I/O).

A frame is `length:i32 | serType:u8 hdrLen:u24 | header | body` (docs/wire-format.md#remoting-frame); the
header is JSON or ROCKETMQ binary, chosen per frame by the high byte, so both are decoded
on every connection.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Mapping

from ferrymq.common import speedups
from ferrymq.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    ResponseCode,
    SerializeType,
)
from ferrymq.remoting.errors import (
    FrameError,
    FrameTooLargeError,
    HeaderDecodeError,
    HeaderFieldError,
)
from ferrymq.remoting.header_fields import to_header_map
from ferrymq.remoting.json_header import decode_json_header_bytes, encode_json_frame, encode_json_header
from ferrymq.remoting.rocketmq_header import decode_rocketmq_header, encode_rocketmq_header

__all__ = [
    "RemotingCommand",
    "encode_frame",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "HeaderDecodeError",
    "HeaderFieldError",
]

_PREFIX = struct.Struct(">iI")  # length, serType << 24 | hdrLen
_LENGTH = struct.Struct(">i")
_TYPE_AND_HEADER_LENGTH = struct.Struct(">I")
_MAX_HEADER = (1 << 24) - 1

# Java's Integer.parseInt / Long.parseLong accept an optional sign and digits only
# (Python's int() would also take blanks and underscores).
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def py_java_number(text: str, bits: int) -> int | None:
    """Java's Integer.parseInt (``bits`` 32) or Long.parseLong (64) of a header field: an
    optional sign and ASCII digits, within the type's range; None for anything else."""
    if _DECIMAL.fullmatch(text):
        number = int(text)
        if -(1 << (bits - 1)) <= number < 1 << (bits - 1):
            return number
    return None


_native = speedups.load("ferrymq.remoting._header_codec")
java_number = _native.java_number if _native is not None else py_java_number

# Kinds of a header field for ``RemotingCommand.header_values``: how its Java text is read.
FIELD_STR, FIELD_INT, FIELD_LONG, FIELD_BOOL = 0, 1, 2, 3
HeaderSpec = tuple[tuple[str, int, object, bool], ...]  # (name, kind, default, required) per field


def py_header_values(ext_fields: dict[str, str], spec: HeaderSpec) -> tuple | int:
    """The values of a header's fields in ``spec`` order, read as ``RemotingCommand.get_str`` /
    ``get_int`` / ``get_long`` / ``get_bool`` read them; or the index of the first field that is
    missing but required or not a number (the caller raises that field's error)."""
    out = []
    for i, (name, kind, default, required) in enumerate(spec):
        value = ext_fields.get(name)
        if not value:
            if required:
                return i
            out.append(default)
        elif kind == FIELD_STR:
            out.append(value)
        elif kind == FIELD_BOOL:
            out.append(value.lower() == "true")
        else:
            number = java_number(value, 32 if kind == FIELD_INT else 64)
            if number is None:
                return i
            out.append(number)
    return tuple(out)


def header_values(ext_fields: dict[str, str], spec: HeaderSpec) -> tuple | int:
    if _native is not None:
        values = _native.header_values(ext_fields, spec)
        if values is not NotImplemented:
            return values
    return py_header_values(ext_fields, spec)


@dataclass(slots=True)
class RemotingCommand:
    code: int
    language: int = LanguageCode.PYTHON
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    serialize_type: SerializeType = SerializeType.JSON
    # time.monotonic() when the frame was read (set by the connection for requests it serves):
    # admission control measures how long a request waited for the event loop.
    received_at: float = field(default=0.0, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes | None = None,
        *,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request; header values are turned into strings the way Java does it."""
        return cls(
            int(code),
            ext_fields=to_header_map(ext_fields),
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """The answer to this request: same opaque, and (like 4.9.4+ Java) the same
        header serialization, so every client version can read it."""
        return RemotingCommand(
            int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=to_header_map(ext_fields),
            body=body,
            serialize_type=self.serialize_type,
        )

    def text_response(self, code: int, ext_fields: dict[str, str]) -> RemotingCommand:
        """``response(code, ext_fields=ext_fields)`` for fields that are Java text already (what
        ``to_header_map`` returns: str values, no None), taken as they are, not converted again:
        the path of the hottest answers (a send's)."""
        return RemotingCommand(int(code), opaque=self.opaque, flag=FLAG_RESPONSE, ext_fields=ext_fields,
                               serialize_type=self.serialize_type)

    # --- typed access to custom header fields ------------------------------------------
    # An empty string counts as absent everywhere: a ROCKETMQ header from a 4.9.4+ peer
    # cannot even carry one, so treating both serializations alike avoids surprises.

    def header_values(self, spec: HeaderSpec) -> tuple:
        """Several custom fields at once, typed as ``spec`` says (name, kind, default, required):
        one call instead of one ``get_*`` per field; a field that is missing but required or not
        a number raises the HeaderFieldError its ``get_*`` would."""
        values = header_values(self.ext_fields, spec)
        if isinstance(values, int):
            name, kind, default, required = spec[values]
            getter = (self.get_str, self.get_int, self.get_long, self.get_bool)[kind]
            getter(name, default, required=required)  # raises
            raise AssertionError(f"header field {name} read differently twice")  # pragma: no cover
        return values

    def get_str(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.ext_fields.get(name)
        if not value:
            if required:
                raise HeaderFieldError(name)
            return default
        return value

    def get_int(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        return self._get_number(name, default, required, 32)

    def get_long(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        return self._get_number(name, default, required, 64)

    def get_bool(self, name: str, default: bool = False, *, required: bool = False) -> bool:
        value = self.get_str(name, required=required)
        if value is None:
            return default
        return value.lower() == "true"  # Boolean.parseBoolean: anything else is false

    def _get_number(self, name: str, default: int | None, required: bool, bits: int) -> int | None:
        value = self.get_str(name, required=required)
        if value is None:
            return default
        # A malformed number fails even for optional fields: Java's header decoding
        # throws NumberFormatException there too, which the peer sees as SYSTEM_ERROR.
        number = java_number(value, bits)
        if number is None:
            raise HeaderFieldError(name, f"the custom field <{name}> is not a valid number: {value!r}")
        return number


# --- encoding ---------------------------------------------------------------------------


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The complete frame, length prefix included."""
    ext = cmd.ext_fields
    if cmd.serialize_type == SerializeType.JSON:  # the common case, compiled where it can be
        frame = encode_json_frame((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, ext), cmd.body)
        if frame is not None:
            return frame
    if ext and not all(type(value) is str for value in ext.values()):
        ext = to_header_map(ext)  # someone stored non-strings directly; send Java text
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        encode_header = encode_rocketmq_header
    elif cmd.serialize_type == SerializeType.JSON:
        encode_header = encode_json_header
    else:
        raise FrameError(f"unknown serialize type {cmd.serialize_type!r}")
    try:
        header = encode_header(
            (int(cmd.code), int(cmd.language), int(cmd.version), int(cmd.opaque), int(cmd.flag), cmd.remark, ext)
        )
    except (struct.error, UnicodeEncodeError, TypeError, ValueError) as exc:
        raise FrameError(f"cannot encode header of command {cmd.code}: {exc}") from exc
    if len(header) > _MAX_HEADER:
        raise FrameError(f"header of command {cmd.code} is {len(header)} bytes, more than 24 bits can say")
    body = cmd.body or b""
    prefix = _PREFIX.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header))
    return b"".join((prefix, header, body))


# --- decoding ---------------------------------------------------------------------------


def _decode_frame(frame: memoryview) -> RemotingCommand:
    """Decode one frame without its length prefix."""
    (type_and_length,) = _TYPE_AND_HEADER_LENGTH.unpack_from(frame, 0)
    serialize_type = type_and_length >> 24
    header_length = type_and_length & _MAX_HEADER
    body_start = 4 + header_length
    if body_start > len(frame):
        raise HeaderDecodeError(f"header length {header_length} exceeds the frame length {len(frame)}")
    if serialize_type == SerializeType.JSON:
        fields = decode_json_header_bytes(frame[4:body_start])
        serialize_type = SerializeType.JSON
    elif serialize_type == SerializeType.ROCKETMQ:
        fields = decode_rocketmq_header(bytes(frame[4:body_start]))
        serialize_type = SerializeType.ROCKETMQ
    else:
        raise HeaderDecodeError(f"unknown serialize type {serialize_type}")
    # Java sees an empty body as null; keep the same distinction.
    body = bytes(frame[body_start:]) if body_start < len(frame) else None
    return RemotingCommand(*fields, body, serialize_type)


class FrameDecoder:
    """Turns a byte stream into commands, buffering partial frames between calls.

    After a FrameError the stream position is lost, so every later call fails too; the
    owner is expected to close the connection.
    """

    __slots__ = ("_max_frame", "_buffer", "_failure")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._max_frame = max_frame
        self._buffer = bytearray()
        self._failure: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        if self._failure is not None:
            raise FrameError(f"decoder already failed: {self._failure}")
        # Fast path: with nothing buffered, parse the caller's bytes in place and only
        # copy a trailing partial frame.
        source = data
        if self._buffer:
            self._buffer += data
            source = self._buffer
        commands: list[RemotingCommand] = []
        try:
            consumed = self._decode_into(source, commands)
        except FrameError as exc:
            self._failure = exc
            self._buffer = bytearray()
            raise
        if source is self._buffer:
            del self._buffer[:consumed]
        elif consumed < len(data):
            self._buffer += memoryview(data)[consumed:]
        return commands

    def _decode_into(self, source: bytes | bytearray, out: list[RemotingCommand]) -> int:
        view = memoryview(source)
        total = len(view)
        limit = self._max_frame - 4  # the maximum counts the length field itself
        pos = 0
        while total - pos >= 4:
            (length,) = _LENGTH.unpack_from(view, pos)
            # Checked before the frame is complete so a hostile length never makes us
            # buffer up to it.
            if length < 4:
                raise FrameError(f"frame length {length} is below the minimum of 4")
            if length > limit:
                raise FrameTooLargeError(f"frame of {length + 4} bytes exceeds the maximum of {self._max_frame}")
            end = pos + 4 + length
            if end > total:
                break
            out.append(_decode_frame(view[pos + 4 : end]))
            pos = end
        return pos
