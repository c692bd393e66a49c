"""RocketMQ 4.x HA frames (docs/wire-format.md#ha-frames).

Two frames travel on a plain TCP connection, no remoting header:
- slave -> master: an 8-byte big-endian long, the slave's CommitLog max offset (the first
  one is where the transfer starts; 0: the start of the master's last CommitLog file);
- master -> slave: a 12-byte header, the 8-byte big-endian physical offset and the 4-byte
  big-endian size of the body, then that many raw CommitLog bytes (size 0: a heartbeat).

FerryMQ's controller mode adds one frame of its own, sent once by the slave before its first
offset report, so the master knows which member of its in-sync set the connection is: a hello
of three big-endian longs, ``HELLO_MAGIC``, the slave's broker identity and the last epoch in
its epoch file. No 4.x slave sends it: the magic read as an offset would be 4.6 exabytes.
A slave that said hello and shuts down gracefully sends a goodbye before it closes the
connection, ``GOODBYE_MAGIC`` as one long: the master drops it from the in-sync set it
proposes at once rather than after haMaxTimeSlaveNotCatchup (a controlled shutdown).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")

HELLO = struct.Struct(">qqq")
HELLO_MAGIC = 0x4652_5259_4841_3031  # b"FRRYHA01": read as an offset, beyond any CommitLog
GOODBYE_MAGIC = 0x4652_5259_4259_4531  # b"FRRYBYE1"
GOODBYE = OFFSET_REPORT.pack(GOODBYE_MAGIC)

TRANSFER_BATCH_SIZE = 32 * 1024  # haTransferBatchSize: body bytes per transfer at most


class HAFrameError(ValueError):
    """A frame no RocketMQ peer sends (negative offset or size, an oversized body)."""


def encode_offset_report(offset: int) -> bytes:
    if offset < 0:
        raise HAFrameError(f"a CommitLog offset cannot be negative: {offset}")
    return OFFSET_REPORT.pack(offset)


def decode_offset_report(data: bytes) -> int:
    if len(data) != OFFSET_REPORT.size:
        raise HAFrameError(f"an offset report is {OFFSET_REPORT.size} bytes, got {len(data)}")
    (offset,) = OFFSET_REPORT.unpack(data)
    if offset < 0:
        raise HAFrameError(f"slave reported a negative CommitLog offset: {offset}")
    return offset


@dataclass(frozen=True)
class Hello:
    identity: int  # the slave's own brokerId (its identity in the group, whatever its role)
    epoch: int  # the last epoch the slave's epoch file records


def encode_hello(identity: int, epoch: int) -> bytes:
    if identity < 0 or epoch < 0:
        raise HAFrameError(f"a hello needs a broker identity and an epoch of 0 or more, got {identity}, {epoch}")
    return HELLO.pack(HELLO_MAGIC, identity, epoch)


def is_hello(first_report: bytes) -> bool:
    """Whether the first 8 bytes a slave sent open a hello rather than an offset report."""
    return OFFSET_REPORT.unpack(first_report)[0] == HELLO_MAGIC


def decode_hello_rest(data: bytes) -> Hello:
    """The 16 bytes after a hello's magic."""
    if len(data) != HELLO.size - OFFSET_REPORT.size:
        raise HAFrameError(f"a hello is {HELLO.size} bytes, got {len(data) + OFFSET_REPORT.size}")
    identity, epoch = struct.unpack(">qq", data)
    if identity < 0 or epoch < 0:
        raise HAFrameError(f"hello with broker identity {identity}, epoch {epoch}")
    return Hello(identity, epoch)


@dataclass(frozen=True)
class TransferHeader:
    offset: int  # CommitLog offset of the body's first byte
    size: int  # body bytes that follow; 0 for a heartbeat

    @property
    def heartbeat(self) -> bool:
        return self.size == 0


def encode_transfer(offset: int, body: bytes = b"") -> bytes:
    """One master -> slave frame: header and body (an empty body is a heartbeat)."""
    if offset < 0:
        raise HAFrameError(f"a CommitLog offset cannot be negative: {offset}")
    return TRANSFER_HEADER.pack(offset, len(body)) + body


def decode_transfer_header(data: bytes, max_body: int) -> TransferHeader:
    """The 12-byte header; a body above ``max_body`` bytes is refused (a peer out of step)."""
    if len(data) != TRANSFER_HEADER.size:
        raise HAFrameError(f"a transfer header is {TRANSFER_HEADER.size} bytes, got {len(data)}")
    offset, size = TRANSFER_HEADER.unpack(data)
    if offset < 0 or size < 0:
        raise HAFrameError(f"transfer header with offset {offset}, size {size}")
    if size > max_body:
        raise HAFrameError(f"transfer of {size} bytes exceeds the {max_body} bytes accepted")
    return TransferHeader(offset, size)
