"""CRC-32 (IEEE 802.3, as ``zlib.crc32`` and Java's ``java.util.zip.CRC32``) of record bodies.

Every stored message's body is checksummed once when written (the record's BODYCRC), and again
where records are checked (recovery, a slave's copy). zlib-ng's ``crc32`` computes the same
value with the CPU's carry-less multiply: 64 ns for a 1 KiB body and 0.28 us for 16 KiB,
against 0.41 and 3.9 us for the interpreter's zlib (bench/RESULTS.md, 2026-11-30); the
interpreter's is the fallback where the ``zlib-ng`` wheel is missing. The compiled record
encoder (``_message_codec.c``) calls this same function, so both codecs agree by construction.
"""

from __future__ import annotations

import zlib

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # (a platform without a zlib-ng wheel: the same value, computed slower)
    crc32 = zlib.crc32

__all__ = ["crc32"]
