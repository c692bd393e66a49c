"""Spark batch read throughput: a FerryMQ batch read (``ferrymq_spark.read_batch``, by the JVM
reader or the Python source) against Spark reading the same messages from Parquet files, in the
same run, same session, same cores. The ratio is the figure.

Not a test. Run: .venv/bin/python bench/spark_read_bench.py [--messages 100000] [--cores 2]
                 [--body-size 1024] [--queues 8] [--rounds 3] [--no-record] [--json FILE]
                 [--reader jvm|python] [--no-bulk-caps] [--broker-set KEY=VALUE ...]
                 [--option KEY=VALUE ...]

A ``ferrymq standalone`` broker (subprocess, 127.0.0.1, temp dir; by default with its per-pull
caps raised for bulk reads, ``BULK_CAPS``, as docs/spark.md#bulk-reads advises for a broker that feeds Spark)
gets ``--messages`` messages of ``--body-size`` bytes over ``--queues`` queues (batch sends). A local[cores] SparkSession then,
``--rounds`` times, alternating the order:

* reads the topic (one task per queue) into Spark's ``noop`` sink, which materialises every row
  and column without writing anything: with ``--reader jvm`` (default) through the JVM reader
  (format ``ferrymq-jvm``, planned on the driver), with ``--reader python`` through the Python
  data source (format ``ferrymq``);
* reads the same rows (written once beforehand by Spark from the source: same schema, same
  bytes) from Parquet into the ``noop`` sink.

Reported: median wall time of each, messages/s, messages/s per executor core (cores = the
local[N] task slots), the ratio FerryMQ / Parquet, and the broker's CPU seconds during the
FerryMQ reads. The broker shares the machine's cores with Spark, as it would on a laptop; on a
cluster it runs elsewhere. With ``--record`` (default) a section is appended to bench/RESULTS.md;
with ``--json FILE`` the same figures are written there (see ``figures``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "spark-jobs"))

from ferrymq_spark.jvm_reader import read_batch  # noqa: E402
from ferrymq_spark.options import BULK_READ_BROKER_SETTINGS  # noqa: E402
from testkit.spark import create_topic, make_spark_session, produce  # noqa: E402
from testkit.processes import StandaloneProcess  # noqa: E402


# The per-pull caps docs/spark.md#bulk-reads advises for a broker that feeds Spark.
BULK_CAPS = tuple(f"{key}={value}" for key, value in BULK_READ_BROKER_SETTINGS.items())
READER_TEXT = {"jvm": "the JVM reader (format ferrymq-jvm, no Python worker on the executors)",
               "python": "the Python data source (format ferrymq, Arrow batches from Python workers)"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def timed(action) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--body-size", type=int, default=1024)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bulk-caps", action=argparse.BooleanOptionalAction, default=True,
                   help="run the broker with the per-pull caps raised for bulk reads (%s; "
                        "default on; --no-bulk-caps: RocketMQ's 32 messages / 256 KiB)" % " ".join(BULK_CAPS))
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker config key for the standalone broker (repeatable)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a ferrymq source option, e.g. ferrymq.pullBatchSize=1024 (repeatable)")
    p.add_argument("--reader", choices=("jvm", "python"), default="jvm",
                   help="the FerryMQ reader: jvm (format ferrymq-jvm, default) or python (format ferrymq)")
    p.add_argument("--record", action=argparse.BooleanOptionalAction, default=True,
                   help="append the figures to bench/RESULTS.md (default on)")
    p.add_argument("--json", default=None, help="also write the measured figures to this file")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-"))
    broker_settings = (list(BULK_CAPS) if args.bulk_caps else []) + args.broker_set
    print(f"reader: {args.reader}; broker settings: {' '.join(broker_settings) or 'defaults'}; source options: "
          f"{' '.join(args.option) or 'defaults'}", flush=True)
    broker = StandaloneProcess(work / "store", settings=broker_settings).start()
    try:
        namesrv = broker.namesrv_addr
        t = time.perf_counter()
        asyncio.run(create_topic(namesrv, "SparkBench", args.queues))
        asyncio.run(produce(namesrv, "SparkBench", args.messages, queues=args.queues, batch=128,
                            min_size=args.body_size, max_size=args.body_size))
        produce_s = time.perf_counter() - t
        print(f"produced {args.messages} x {args.body_size} B in {produce_s:.1f} s "
              f"({args.messages / produce_s:,.0f} msg/s, batch sends of 128)", flush=True)

        spark = make_spark_session("ferrymq-spark-bench", cores=args.cores)
        options = {"namesrv": namesrv, "subscribe": "SparkBench"}
        for kv in args.option:
            key, _, value = kv.partition("=")
            options[key] = value

        def load():  # planned anew for every read, as a job would
            return read_batch(spark, options, args.reader)

        parquet_dir = str(work / "parquet")
        t = time.perf_counter()
        load().write.parquet(parquet_dir)  # the same rows, once, as Parquet
        copy_s = time.perf_counter() - t
        assert spark.read.parquet(parquet_dir).count() == args.messages

        def read_ferrymq() -> None:
            load().write.format("noop").mode("overwrite").save()

        def read_parquet() -> None:
            spark.read.parquet(parquet_dir).write.format("noop").mode("overwrite").save()

        read_ferrymq(), read_parquet()  # warm-up: JIT, Python workers, page cache
        ferry, parq, broker_cpu = [], [], []
        for i in range(args.rounds):
            order = [("ferrymq", read_ferrymq), ("parquet", read_parquet)]
            for name, action in order if i % 2 == 0 else reversed(order):
                cpu0 = cpu_seconds(broker.proc.pid)
                seconds = timed(action)
                if name == "ferrymq":
                    ferry.append(seconds)
                    broker_cpu.append(cpu_seconds(broker.proc.pid) - cpu0)
                else:
                    parq.append(seconds)
                print(f"round {i + 1}: {name:8s} {seconds:6.2f} s  {args.messages / seconds:10,.0f} msg/s", flush=True)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)  # the store and the Parquet copy: ~250 MB per run

    f_s, p_s = statistics.median(ferry), statistics.median(parq)
    f_rate, p_rate = args.messages / f_s, args.messages / p_s
    rows = [
        ("ferrymq source", f_s, f_rate, f_rate / args.cores),
        ("Parquet files", p_s, p_rate, p_rate / args.cores),
    ]
    print(f"\n{'read':16s} {'median s':>9s} {'msg/s':>12s} {'msg/s/core':>12s}")
    for name, s, rate, per_core in rows:
        print(f"{name:16s} {s:9.2f} {rate:12,.0f} {per_core:12,.0f}")
    ratio = f_rate / p_rate
    print(f"ratio ferrymq / parquet: {ratio:.3f} (Parquet is {1 / ratio:.1f}x faster); "
          f"broker CPU per FerryMQ read: {statistics.median(broker_cpu):.1f} s")

    if args.record:
        record(args, rows, ratio, statistics.median(broker_cpu), produce_s, copy_s)
    if args.json:
        results = figures(rows, ratio, statistics.median(broker_cpu), produce_s, copy_s)
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
        print(f"results written to {args.json}")
    return 0


def figures(rows, ratio: float, broker_cpu: float, produce_s: float, copy_s: float) -> dict:
    """The measured figures, as ``--json`` writes them: per read (``ferrymq``, ``parquet``) its
    median wall time (``medianS``), rows/s (``rowsPerSec``) and rows/s per executor core
    (``rowsPerSecPerCore``); ``ratio`` = ferrymq rows/s / Parquet rows/s; ``brokerCpuS`` = the
    broker's median CPU seconds per FerryMQ read; ``produceS`` and ``parquetCopyS`` = the set-up."""
    reads = {key: {"medianS": s, "rowsPerSec": rate, "rowsPerSecPerCore": per_core}
             for key, (_, s, rate, per_core) in zip(("ferrymq", "parquet"), rows)}
    return {**reads, "ratio": ratio, "brokerCpuS": broker_cpu, "produceS": produce_s, "parquetCopyS": copy_s}


def record(args, rows, ratio: float, broker_cpu: float, produce_s: float, copy_s: float) -> None:
    import pyspark
    lines = [
        "",
        f"## Spark batch read: ferrymq source ({args.reader} reader) vs Parquet ({datetime.date.today().isoformat()})",
        "",
        f"`bench/spark_read_bench.py --messages {args.messages} --body-size {args.body_size} --queues {args.queues} "
        f"--cores {args.cores} --rounds {args.rounds} --reader {args.reader}"
        f"{'' if args.bulk_caps else ' --no-bulk-caps'}`: {READER_TEXT[args.reader]}; broker "
        f"{'with ' + ' '.join(BULK_CAPS) if args.bulk_caps else 'with RocketMQ per-pull caps (32 / 256 KiB)'}; "
        f"pyspark {pyspark.__version__}, local[{args.cores}], "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs shared with the broker process. "
        f"{args.messages:,} messages of {args.body_size} B over {args.queues} queues (one task per queue), each read "
        f"into Spark's `noop` sink (every row and column materialised); the Parquet copy is the same rows written "
        f"by Spark from the source. Median of {args.rounds} rounds, alternating order, after a warm-up.",
        "",
        "| read | median s | msg/s | msg/s per executor core |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {s:.2f} | {rate:,.0f} | {per_core:,.0f} |" for name, s, rate, per_core in rows],
        "",
        f"Ratio ferrymq / Parquet: **{ratio:.3f}** (Parquet is {1 / ratio:.1f}x faster). Broker CPU per FerryMQ read: "
        f"{broker_cpu:.1f} s. Producing took {produce_s:.1f} s, the Parquet copy {copy_s:.1f} s.",
        "",
    ]
    with open(REPO / "bench" / "RESULTS.md", "a", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print("appended to bench/RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
