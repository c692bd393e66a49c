"""The answer to SendMessage, written in protobuf's wire format without building it as messages.

Every 5.x send is answered with a ``SendMessageResponse``: a status and one ``SendResultEntry``
per message. Built as upb messages and serialized (two messages created, the status merged into
each, then serialized) it took about 5 µs a send on the bench machine; written here, about 1.4
(bench/RESULTS.md, "The 5.x send's answer written as bytes"). The bytes are what ``SerializeToString`` writes for the same
fields (fields in number order, proto3 defaults left out): tests/grpc/test_send_response.py
holds the two to each other.
"""

from __future__ import annotations

from typing import NamedTuple

from ferrymq.grpc.protocol import Code

# field tags (number << 3 | wire type): Status.code 1 varint, Status.message 2 bytes;
# SendResultEntry status 1, message_id 2, transaction_id 3, offset 4 (varint), recall_handle 5;
# SendMessageResponse status 1, entries 2
_TAG_1_BYTES, _TAG_2_BYTES, _TAG_3_BYTES, _TAG_5_BYTES = b"\x0a", b"\x12", b"\x1a", b"\x2a"
_TAG_1_VARINT, _TAG_4_VARINT = b"\x08", b"\x20"


class SentEntry(NamedTuple):
    """One message's outcome, as its ``SendResultEntry`` carries it."""

    code: int
    message: str
    message_id: str = ""
    offset: int = 0
    transaction_id: str = ""
    recall_handle: str = ""


_CODE_OK = int(Code.OK)


def refused(code: int, message: str = "") -> SentEntry:
    """A message not stored: its status only (the message defaults to the code's name, as
    ``protocol.status`` writes it)."""
    return SentEntry(code, message or Code.Name(code))


def stored(message_id: str, offset: int, transaction_id: str = "", recall_handle: str = "") -> SentEntry:
    """A message stored: its id and queue offset (and a transaction's id, a timer message's recall handle)."""
    return SentEntry(_CODE_OK, "OK", message_id, offset, transaction_id, recall_handle)


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return bytes((n,))
    n &= (1 << 64) - 1  # a negative int64 takes ten bytes, as protobuf writes it
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, data: bytes) -> bytes:
    n = len(data)
    return tag + (bytes((n,)) if n < 0x80 else _varint(n)) + data


def _status(code: int, message: str) -> bytes:
    inner = (_TAG_1_VARINT + _varint(code) if code else b"") + (_field(_TAG_2_BYTES, message.encode()) if message else b"")
    return _field(_TAG_1_BYTES, inner)


_OK = _status(_CODE_OK, Code.Name(_CODE_OK))


def _entry(entry: SentEntry) -> bytes:
    code, message, message_id, offset, transaction_id, recall_handle = entry
    out = _OK if code == _CODE_OK and message == "OK" else _status(code, message)
    if message_id:
        out += _field(_TAG_2_BYTES, message_id.encode())
    if transaction_id:
        out += _field(_TAG_3_BYTES, transaction_id.encode())
    if offset:
        out += _TAG_4_VARINT + _varint(offset)
    if recall_handle:
        out += _field(_TAG_5_BYTES, recall_handle.encode())
    return out


def send_response(entries: list[SentEntry]) -> bytes:
    """The serialized ``SendMessageResponse`` of ``entries``: its status is the first failed
    entry's, else OK."""
    if len(entries) == 1:  # the common request: one message
        entry = entries[0]
        head = _OK if entry.code == _CODE_OK else _status(entry.code, entry.message)
        return head + _field(_TAG_2_BYTES, _entry(entry))
    failed = next((e for e in entries if e.code != _CODE_OK), None)
    head = _OK if failed is None else _status(failed.code, failed.message)
    return head + b"".join(_field(_TAG_2_BYTES, _entry(e)) for e in entries)
