"""Spark batch write throughput: the FerryMQ sink (``df.write.format("ferrymq")``, exactly once
per batch by transactional messages: docs/spark.md#writing-to-a-topic) against Spark writing the
same rows to Parquet, in the same run, same session, same cores. The ratio is the figure.

Not a test. Run: .venv/bin/python bench/spark_write_bench.py [--rows 100000] [--cores 2]
                 [--body-size 256] [--partitions 2] [--queues 8] [--rounds 3] [--json FILE]

A ``ferrymq standalone`` broker (subprocess, 127.0.0.1, temp dir) with the target topic and the
sink's commit topic; a local[cores] SparkSession builds ``--rows`` rows (a string body of
``--body-size`` bytes and a key), cached, over ``--partitions`` partitions, then ``--rounds``
times, alternating which goes first, writes them with the sink and to Parquet. Reported: the
median wall time of each, rows/s, rows/s per core, the ratio sink / Parquet, and the broker's
CPU seconds during the sink's writes (it shares the cores with Spark here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "spark-jobs")]

from ferrymq_spark.sink_options import DEFAULT_COMMIT_TOPIC  # noqa: E402
from testkit import machine  # noqa: E402
from testkit.processes import StandaloneProcess  # noqa: E402
from testkit.spark import create_topic, make_spark_session  # noqa: E402

from spark_read_bench import cpu_seconds  # noqa: E402  (bench/, beside this script)

TOPIC = "SparkWriteBench"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--body-size", type=int, default=256)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    info = machine.machine_info()
    print(f"machine: {info['nproc']} CPUs ({info['cpu']}), load {info['load_avg']}, commit {machine.git_commit()}")
    work = Path(tempfile.mkdtemp(prefix="ferrymq-spark-write-"))
    broker = StandaloneProcess(work / "store").start()
    try:
        for topic in (TOPIC, DEFAULT_COMMIT_TOPIC):
            asyncio.run(create_topic(broker.namesrv_addr, topic, args.queues))
        spark = make_spark_session("ferrymq-write-bench", cores=args.cores)
        df = (spark.range(args.rows).selectExpr(f"LPAD(CAST(id AS STRING), {args.body_size}, 'x') AS body",
                                                "CONCAT('k-', id) AS keys")
              .repartition(args.partitions).cache())
        df.count()
        times: dict[str, list[float]] = {"ferrymq": [], "parquet": []}
        broker_cpu: list[float] = []
        for r in range(args.rounds):
            for kind in (("ferrymq", "parquet") if r % 2 == 0 else ("parquet", "ferrymq")):
                started, cpu = time.monotonic(), cpu_seconds(broker.proc.pid)
                if kind == "ferrymq":
                    df.write.format("ferrymq").mode("append").option("namesrv", broker.namesrv_addr) \
                        .option("topic", TOPIC).save()
                    broker_cpu.append(cpu_seconds(broker.proc.pid) - cpu)
                else:
                    df.write.mode("overwrite").parquet(str(work / "parquet"))
                times[kind].append(time.monotonic() - started)
                print(f"round {r + 1}: {kind} {args.rows} rows in {times[kind][-1]:.1f} s", flush=True)
        spark.stop()
    finally:
        broker.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    figures = {"rows": args.rows, "cores": args.cores, "body_size": args.body_size, "partitions": args.partitions,
               "median_s": med, "rows_per_s": {k: args.rows / v for k, v in med.items()},
               "rows_per_s_per_core": {k: args.rows / v / args.cores for k, v in med.items()},
               "ratio": med["parquet"] / med["ferrymq"], "broker_cpu_s": statistics.median(broker_cpu),
               "rounds": times, "machine": info, **machine.git_commit()}
    print(f"\n{'':24}{'FerryMQ sink':>14}{'Parquet':>12}\n{'rows/s':24}{figures['rows_per_s']['ferrymq']:>14,.0f}"
          f"{figures['rows_per_s']['parquet']:>12,.0f}\n{'rows/s per core':24}"
          f"{figures['rows_per_s_per_core']['ferrymq']:>14,.0f}{figures['rows_per_s_per_core']['parquet']:>12,.0f}\n"
          f"sink / Parquet: {figures['ratio']:.2f}x; broker CPU during a sink write: {figures['broker_cpu_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
