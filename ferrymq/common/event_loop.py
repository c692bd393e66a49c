"""The event loop FerryMQ's processes run on.

The standard library's loop by default; ``FERRYMQ_EVENT_LOOP=uvloop`` runs the process on
uvloop instead (in the dev extra; otherwise ``pip install uvloop``). Measured with the broker
bench on this project's 2-core machine since the remoting layer became a plain
``asyncio.Protocol`` (bench/RESULTS.md, 2026-11-27): uvloop takes roughly 5-10 % off the broker's
CPU per message, within the run-to-run spread of a busy host, so it stays opt-in, one switch
for comparing, tested against a real broker (tests/integration/test_standalone_process.py).
Library code never depends on which loop runs: only the entry points choose, through
:func:`run`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from ferrymq.common.config_loader import ConfigError

T = TypeVar("T")

CHOICES = ("asyncio", "uvloop")


def chosen() -> str:
    """The loop :func:`run` will use, from ``FERRYMQ_EVENT_LOOP`` (default asyncio)."""
    wanted = os.environ.get("FERRYMQ_EVENT_LOOP", "").strip().lower() or "asyncio"
    if wanted not in CHOICES:
        raise ConfigError(f"FERRYMQ_EVENT_LOOP must be one of {', '.join(CHOICES)}, got {wanted!r}")
    if wanted == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise ConfigError("FERRYMQ_EVENT_LOOP=uvloop but uvloop is not installed (pip install uvloop)") from None
    return wanted


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on the chosen loop."""
    if chosen() == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)
