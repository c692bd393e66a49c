"""Waiting for a condition with a deadline, never sleeping as synchronisation.

Both take the same parameters by name: ``what`` (named in the failure), ``predicate`` (returns
something truthy when the condition holds; that value is returned), ``timeout`` (s),
``interval`` (s between checks) and ``diagnostics`` (a callable whose text is appended to the
failure). ``poll_until`` blocks, for another process's state (a server, a cluster, Spark's
progress), and counts an exception from ``predicate`` as "not yet"; ``wait_until`` runs on the
event loop, accepts an async predicate, and lets an exception from it fail the test at once.
Their positional order differs (``poll_until(what, predicate, timeout)``,
``wait_until(predicate, timeout, what=...)``) as their many callers have it.
"""

from __future__ import annotations

import asyncio
import inspect
import time


def poll_until(what: str, predicate, timeout: float, interval: float = 0.2, diagnostics=lambda: ""):
    """Block until ``predicate()`` is truthy and return its value. At the deadline a
    ``TimeoutError`` names ``what``, the last error and ``diagnostics()``."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as e:  # noqa: BLE001 - not there yet
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached in {timeout:.0f}s (last error: {last_error})\n{diagnostics()}")


async def wait_until(predicate, timeout: float = 10.0, what: str = "the condition", interval: float = 0.02,
                     diagnostics=lambda: ""):
    """Wait on the event loop until ``predicate()`` (plain or async) is truthy and return its
    value. At the deadline an ``AssertionError`` (the test's failure) names ``what`` and
    ``diagnostics()``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            extra = diagnostics()
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}" + (f"\n{extra}" if extra else ""))
        await asyncio.sleep(interval)
