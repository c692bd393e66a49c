"""The timing store alone (docs/timers.md): memory and speed with many pending timers.

Not a test. Run: .venv/bin/python bench/timer_store_bench.py [--timers 1000000] [--batch 1000] [--dir DIR]

Adds ``--timers`` timers spread over three days (timerMaxDelaySec's default) in batches of
``--batch`` (one batch = one dispatch run), syncs, then takes every slot of the first hour. Prints
this process's RSS (VmRSS from /proc/self/status; the store's files use positioned I/O, so their
pages are page cache, not RSS) before and after, with add and take rates. Issue 31's target is the
whole broker under 300 MiB with 1 000 000 pending timers; this is the timing store's share.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferrymq.store.timer_store import TimerStore  # noqa: E402

THREE_DAYS_S = 259_200


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def disk_mib(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        now = int(time.time() * 1000) // 1000 * 1000
        store = TimerStore(root)
        store.open(now)
        store.add([(now + 1000, 0, 100)])
        before = rss_mib()
        started = time.perf_counter()
        for first in range(1, args.timers, args.batch):
            last = min(first + args.batch, args.timers)
            # spread over three days, not in time order (a prime stride)
            store.add([(now + 1000 + (i * 7919 % (THREE_DAYS_S - 1)) * 1000, i * 100, 100) for i in range(first, last)])
        store.sync()
        add_s = time.perf_counter() - started
        after_add = rss_mib()
        started = time.perf_counter()
        taken = 0
        while (slot := store.take(now + 3_600_000)) is not None:
            taken += len(slot.records)
        take_s = time.perf_counter() - started
        after_take = rss_mib()
        files = disk_mib(root)
        store.close()
    print(f"timers added        {args.timers:>12,}  in {add_s:6.2f} s  ({args.timers / add_s:,.0f}/s)")
    print(f"first hour taken    {taken:>12,}  in {take_s:6.2f} s  ({3600 / take_s:,.0f} slots/s)")
    print(f"RSS before          {before:10.1f} MiB")
    print(f"RSS after adding    {after_add:10.1f} MiB  (growth {after_add - before:+.1f} MiB)")
    print(f"RSS after taking    {after_take:10.1f} MiB  (growth {after_take - before:+.1f} MiB)")
    print(f"files on disk       {files:10.1f} MiB  (TimerLog + wheel + checkpoint)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
