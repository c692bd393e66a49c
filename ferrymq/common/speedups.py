"""Loading the compiled twins of hot pure-Python codecs, when they are there.

Three C extensions (``ferrymq/common/_message_codec.c``: records, properties, batch bodies, Java
string hashes, a put's run of records in one call per step: encode, stamp, place, ConsumeQueue
entries, index postings, and a run of records decoded back into messages;
``ferrymq/remoting/_header_codec.c``: JSON remoting headers;
``ferrymq/grpc/_hpack.c``: HPACK header-block and Huffman decoding for the gRPC endpoint) are built wherever a
C compiler and the Python headers are there. ``load`` returns one, or None when it was not built
or ``FERRYMQ_NO_EXTENSIONS`` is set to anything but ""/"0". Modules with a compiled twin pick it
at import time, so a process runs one implementation throughout. The pure-Python versions are
the specification: tests/common/test_speedups.py runs both over the same inputs
(tests/grpc/test_hpack.py for HPACK's).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["EXTENSIONS", "disabled", "load"]

EXTENSIONS = ("ferrymq.common._message_codec", "ferrymq.remoting._header_codec", "ferrymq.grpc._hpack")

disabled = os.environ.get("FERRYMQ_NO_EXTENSIONS", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The extension module ``name`` (one of EXTENSIONS), or None to run pure Python."""
    if disabled:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
