"""Java's ``String.hashCode()``, bit for bit.

RocketMQ stores ``TAGS.hashCode()`` as the ConsumeQueue tagsCode and clients send the
same hashes in a subscription's codeSet, so ours must match the JVM exactly: the hash
runs over UTF-16 code units (a non-BMP character counts as two surrogates) with 32-bit
wrap-around, and the result is a signed int.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from ferrymq.common import speedups

_native = speedups.load("ferrymq.common._message_codec")

_MASK32 = 0xFFFFFFFF


# Index keys are "topic#UNIQ_KEY": 20 of UNIQ_KEY's 32 hex digits (IP, pid, a per-process
# number) repeat for every message of a producer, the last 12 (time, counter) do not. The
# hash of a long ASCII key is therefore taken as the cached hash of all but its last
# _TAIL characters, continued over the tail: h(p + t) = h(p) * 31^len(t) + h(t) (mod 2^32).
_TAIL = 12
_LONG = 24


def _units_hash(units, h: int = 0) -> int:
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return h


@lru_cache(maxsize=1024)
def _ascii_prefix_hash(prefix: str) -> int:
    return _units_hash(prefix.encode("ascii"))


@lru_cache(maxsize=4096)  # tags repeat endlessly; a cache hit is cheaper than the loop
def _short_hash(s: str) -> int:
    if s.isascii():
        h = _units_hash(s.encode("ascii"))  # one byte == one UTF-16 unit
    else:
        raw = s.encode("utf-16-be")
        h = _units_hash(struct.unpack(f">{len(raw) // 2}H", raw))
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def py_java_string_hash(s: str) -> int:
    """``s.hashCode()`` as Java computes it: signed int32."""
    if len(s) < _LONG or not s.isascii():
        return _short_hash(s)
    cut = len(s) - _TAIL
    h = _units_hash(s[cut:].encode("ascii"), _ascii_prefix_hash(s[:cut]))
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


java_string_hash = _native.java_string_hash if _native is not None else py_java_string_hash
