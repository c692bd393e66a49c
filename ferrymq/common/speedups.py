"""The compiled per-message codecs, when they are there (``ferrymq/common/_speedups.c``).

``native`` is the extension module, or None when it was not built (no C compiler where the
package was installed) or ``FERRYMQ_NO_EXTENSIONS`` is set to anything but ""/"0". Modules
with a compiled twin (message, java_hash) pick it at import time from here, so a process
runs one implementation throughout. The pure-Python versions are the specification: the
tests run both over the same inputs (tests/common/test_speedups.py).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["native", "disabled"]

disabled = os.environ.get("FERRYMQ_NO_EXTENSIONS", "") not in ("", "0")


def _load() -> ModuleType | None:
    if disabled:
        return None
    try:
        from ferrymq.common import _speedups
    except ImportError:
        return None
    return _speedups


native = _load()
