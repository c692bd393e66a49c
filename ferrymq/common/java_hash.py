"""Java's ``String.hashCode()``, bit for bit.

RocketMQ stores ``TAGS.hashCode()`` as the ConsumeQueue tagsCode and clients send the
same hashes in a subscription's codeSet, so ours must match the JVM exactly: the hash
runs over UTF-16 code units (a non-BMP character counts as two surrogates) with 32-bit
wrap-around, and the result is a signed int.
"""

from __future__ import annotations

import struct
from functools import lru_cache

_MASK32 = 0xFFFFFFFF


@lru_cache(maxsize=4096)  # tags repeat endlessly; a cache hit is cheaper than the loop
def java_string_hash(s: str) -> int:
    """``s.hashCode()`` as Java computes it: signed int32."""
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")  # one byte == one UTF-16 unit
    else:
        raw = s.encode("utf-16-be")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h
