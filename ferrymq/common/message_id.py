"""The two message ids RocketMQ hands out (docs/wire-format.md#message-ids).

* The **offset msgId** names where a record lives: store host IP + port + CommitLog
  offset. Admin tools decode it and connect to that address, so it must be exact.
* The **UNIQ_KEY** is the producer-side id put in the properties of every message.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import re
import socket
import struct
import threading
import time
from functools import lru_cache

from ferrymq.common.net import local_ip

_PORT_OFFSET = struct.Struct(">iq")  # port i32 + physical offset i64


@lru_cache(maxsize=256)
def pack_ip(host: str) -> bytes:
    """IP literal -> 4 or 16 network-order bytes; ValueError for anything else."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.inet_pton(family, host)
    except (OSError, TypeError) as exc:
        raise ValueError(f"not an IP address: {host!r}") from exc


@lru_cache(maxsize=256)
def unpack_ip(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw)


@lru_cache(maxsize=64)
def offset_msg_id_prefix(host: str, port: int) -> str:
    """The constant part of every offset msgId a given store host hands out."""
    return (pack_ip(host) + struct.pack(">i", port)).hex().upper()


def offset_msg_id(host: str, port: int, physical_offset: int) -> str:
    """Uppercase hex of IP + port i32 + offset i64: 32 chars (IPv4) or 56 (IPv6)."""
    if physical_offset < 0:
        raise ValueError(f"negative physical offset {physical_offset}")
    return offset_msg_id_prefix(host, port) + f"{physical_offset:016X}"


_HEX = re.compile(r"[0-9A-Fa-f]*")


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Offset msgId -> (host, port, physical offset)."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset msgId must be 32 or 56 hex chars, got {len(msg_id)}: {msg_id!r}")
    if not _HEX.fullmatch(msg_id):  # bytes.fromhex alone skips whitespace: 56 chars could decode as 16 bytes
        raise ValueError(f"offset msgId is not hex: {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    ip_len = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    if offset < 0:
        raise ValueError(f"offset msgId names a negative CommitLog offset: {msg_id!r}")
    return unpack_ip(raw[:ip_len]), port, offset


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """Start of the current local month and of the next one, in epoch ms (as Java's Calendar)."""
    now = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqKeyGenerator:
    """UNIQ_KEY ids: IP(4) + pid i16 + random i32 + ms since month start i32 + counter i16.

    Java fills the i32 after the pid with its class loader's identity hash, which is
    just a per-process random number; we draw one. Thread-safe.
    """

    _TAIL = struct.Struct(">IH")

    def __init__(self, ip: bytes | None = None, pid: int | None = None, salt: int | None = None) -> None:
        ip = socket.inet_aton(local_ip()) if ip is None else ip
        if len(ip) != 4:
            raise ValueError("UNIQ_KEY ip must be 4 bytes")
        pid = os.getpid() if pid is None else pid
        salt = random.getrandbits(32) if salt is None else salt
        self._prefix = (ip + struct.pack(">HI", pid & 0xFFFF, salt & 0xFFFFFFFF)).hex().upper()
        self._counter = itertools.count()  # next() on it is atomic under the GIL
        self._lock = threading.Lock()
        self._month_start, self._next_month = _month_bounds_ms(time.time_ns() // 1_000_000)

    def new_key(self) -> str:
        now = time.time_ns() // 1_000_000
        if now >= self._next_month:
            with self._lock:
                if now >= self._next_month:
                    self._month_start, self._next_month = _month_bounds_ms(now)
        diff = now - self._month_start
        if -1_000_000 < diff < 0:  # clock stepped back a little (NTP): Java clamps to 0 too
            diff = 0
        tail = self._TAIL.pack(diff & 0xFFFFFFFF, next(self._counter) & 0xFFFF)
        return self._prefix + tail.hex().upper()


_default_generator: UniqKeyGenerator | None = None


def new_uniq_key() -> str:
    """A fresh UNIQ_KEY from the process-wide generator."""
    global _default_generator
    if _default_generator is None:
        _default_generator = UniqKeyGenerator()
    return _default_generator.new_key()
