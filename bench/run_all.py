"""``make bench``: the broker benchmarks against Apache RocketMQ 4.9.7 (throughput and latency
with ASYNC_FLUSH; sync128 with both brokers on SYNC_FLUSH; master + slave pairs as
ASYNC_MASTER and SYNC_MASTER; broker memory with 1 000 topics and 10 000 held pulls; long-poll
wake latency; push consumers end to end, catch-up included; timer messages against Apache 5.3.1;
Spark batch read against Parquet),
then the storage-layer benchmarks (throughput, SYNC_FLUSH group commit, recovery of a 1 GiB
CommitLog). Arguments are passed to bench/broker_bench.py (e.g. ``--quick``; the SYNC_FLUSH run
gets them too, then its own ``--flush SYNC_FLUSH --scenarios sync128``); ``--quick`` also
shortens the others. A full run measures the broker rows in three rounds (``--rounds 3``, the
brokers alternating which goes first) and judges their median ratio; ``--quick`` in one.

Each benchmark that has ``--json`` writes its figures to .cache/bench/last-run/<name>.json (the
previous run's file removed first); at the end, issue 11's target rows are printed from those
files in one table (bench/targets.py), a row whose benchmark failed saying why it is missing.

Run: .venv/bin/python bench/run_all.py [--quick] [broker_bench options]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import targets

BENCH = Path(__file__).resolve().parent
JSON_DIR = BENCH.parent / ".cache" / "bench" / "last-run"
BROKER_ROUNDS = 3  # rounds of the broker and SYNC_FLUSH rows in a full run (--quick: one)


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


def run_with_json(key: str, title: str, cmd: list[str], timeout: float, docs: dict) -> int:
    """``run``, the benchmark writing its figures to JSON_DIR/<key>.json; what it wrote (or why
    there is nothing) goes into ``docs`` under ``key`` for the summary."""
    path = JSON_DIR / f"{key}.json"
    path.unlink(missing_ok=True)  # no figures of an earlier run taken for this one's
    rc = run(title, [*cmd, "--json", str(path)], timeout)
    docs[key] = targets.load(path, Path(cmd[1]).name, rc)
    return rc


def bench(script: str, *args: str) -> list[str]:
    return [sys.executable, str(BENCH / script), *args]


def main() -> int:
    args = sys.argv[1:]
    quick = "--quick" in args
    t0 = time.monotonic()
    JSON_DIR.mkdir(parents=True, exist_ok=True)
    docs: dict = {}
    # Three rounds of the broker rows, the brokers alternating which goes first, judged on the
    # median ratio: a single round's ratio swings by up to 2x on a shared 2-core VM (RESULTS.md).
    rounds = [] if quick or any(a.startswith("--rounds") for a in args) else ["--rounds", str(BROKER_ROUNDS)]
    rc = run_with_json(targets.BROKER, "broker benchmark", bench("broker_bench.py", *args, *rounds), 1800, docs)
    # issue 11's SYNC_FLUSH row: 128 producers, both brokers acknowledging after fsync (group commit)
    rc |= run_with_json(targets.SYNC_FLUSH, "broker benchmark, SYNC_FLUSH",
                        bench("broker_bench.py", *args, *rounds, "--flush", "SYNC_FLUSH", "--scenarios", "sync128"),
                        1200, docs)
    quick_flag = ["--quick"] if quick else []
    # issue 13's row: master + slave, ASYNC_MASTER beside SYNC_MASTER, FerryMQ's pair against Apache's
    rc |= run_with_json(targets.REPLICATION, "replication (master + slave)",
                        bench("replication_bench.py", *quick_flag), 1200, docs)
    rc |= run_with_json(targets.MEMORY, "broker memory", bench("memory_bench.py", *quick_flag), 900, docs)
    rc |= run_with_json(targets.WAKE, "long-poll wake latency", bench("wake_latency.py", *quick_flag), 600, docs)
    rc |= run_with_json(targets.E2E, "push consumer end to end (latency, catch-up)",
                        bench("e2e_latency.py", *quick_flag), 1800, docs)
    # issue 31's rows: timer messages (lateness under load, schedule and fire, pending RSS) against
    # Apache's 5.3.1 broker, the 5.3.1 Java client as the load (figures in the JSON only: --no-record)
    rc |= run_with_json(targets.TIMERS, "timer messages vs Apache 5.3.1",
                        bench("timer_bench.py", *quick_flag, "--no-record"), 900 if quick else 2400, docs)
    spark_args = ["--messages", "20000", "--rounds", "1"] if quick else []
    rc |= run_with_json(targets.SPARK, "Spark batch read vs Parquet",
                        bench("spark_read_bench.py", *spark_args, "--no-record"), 1200, docs)
    rc |= run("Spark batch write (the sink) vs Parquet",
              bench("spark_write_bench.py", *(["--rows", "20000", "--rounds", "1"] if quick else [])), 1800)
    store_args = ["--messages", "20000" if quick else "100000", "--sync-messages", "200" if quick else "2000"]
    rc |= run("store benchmark", bench("store_bench.py", *store_args), 300)
    rc |= run("SYNC_FLUSH group commit", bench("store_group_commit.py", "--seconds", "2" if quick else "5"), 600)
    rc |= run("store recovery", bench("store_recovery.py", "--size-mib", "128" if quick else "1024"), 900)
    print(f"\nall benchmarks: {time.monotonic() - t0:.0f} s, exit {rc}")
    targets.print_summary(docs)
    return rc


if __name__ == "__main__":
    sys.exit(main())
