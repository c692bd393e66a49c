"""``make bench``: the broker benchmarks against Apache RocketMQ 4.9.7 (throughput and latency
with ASYNC_FLUSH; sync128 with both brokers on SYNC_FLUSH; master + slave pairs as
ASYNC_MASTER and SYNC_MASTER; broker memory with 1 000 topics and 10 000 held pulls; long-poll
wake latency), then the storage-layer benchmarks (throughput, SYNC_FLUSH group commit, recovery of a 1 GiB CommitLog). Arguments are passed to
bench/broker_bench.py (e.g. ``--quick``; the SYNC_FLUSH run gets them too, then its own
``--flush SYNC_FLUSH --scenarios sync128``); ``--quick`` also shortens the others.

Run: .venv/bin/python bench/run_all.py [--quick] [broker_bench options]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def run(title: str, cmd: list[str], timeout: float) -> int:
    print(f"\n##### {title}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"##### {title}: timed out after {timeout:.0f} s", flush=True)
        return 1
    print(f"##### {title}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
    return rc


def main() -> int:
    args = sys.argv[1:]
    quick = "--quick" in args
    t0 = time.monotonic()
    rc = run("broker benchmark", [sys.executable, str(BENCH / "broker_bench.py"), *args], 900)
    # issue 11's SYNC_FLUSH row: 128 producers, both brokers acknowledging after fsync (group commit)
    rc |= run("broker benchmark, SYNC_FLUSH", [sys.executable, str(BENCH / "broker_bench.py"), *args,
                                               "--flush", "SYNC_FLUSH", "--scenarios", "sync128"], 600)
    quick_flag = ["--quick"] if quick else []
    # issue 13's row: master + slave, ASYNC_MASTER beside SYNC_MASTER, FerryMQ's pair against Apache's
    rc |= run("replication (master + slave)", [sys.executable, str(BENCH / "replication_bench.py"), *quick_flag], 1200)
    rc |= run("broker memory", [sys.executable, str(BENCH / "memory_bench.py"), *quick_flag], 900)
    rc |= run("long-poll wake latency", [sys.executable, str(BENCH / "wake_latency.py"), *quick_flag], 600)
    store_args = ["--messages", "20000" if quick else "100000", "--sync-messages", "200" if quick else "2000"]
    rc |= run("store benchmark", [sys.executable, str(BENCH / "store_bench.py"), *store_args], 300)
    rc |= run("SYNC_FLUSH group commit", [sys.executable, str(BENCH / "store_group_commit.py"),
                                          "--seconds", "2" if quick else "5"], 600)
    rc |= run("store recovery", [sys.executable, str(BENCH / "store_recovery.py"),
                                 "--size-mib", "128" if quick else "1024"], 900)
    print(f"\nall benchmarks: {time.monotonic() - t0:.0f} s, exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
