"""Publish the rows of new input files to a FerryMQ topic, each row exactly once.

    python spark-jobs/jobs/publish_to_topic.py --master 'local[2]' \\
        --namesrv 127.0.0.1:9876 --topic Orders --input /data/outbox/orders --format parquet \\
        --checkpoint /data/checkpoints/orders-publish --keys 'CAST(order_id AS STRING)'

On Kubernetes the CronJob built from ``Topic.spec.sparkJob`` runs it with ``spark-submit`` in
client mode (no ``--master`` here then: spark-submit sets it).

A run is a Structured Streaming query over the input directory with ``trigger(availableNow)``:
it publishes the files that arrived since the last run and stops. Which files are done lives in
the checkpoint, and the sink writes each micro-batch with transactional messages committed with
Spark's commit (ferrymq_spark.sink): a run killed part-way leaves nothing twice and nothing
lost once the next run has finished. The body is ``--body`` (a SQL expression; by default the
whole row as JSON), with optional ``--keys``, ``--tags`` and ``--sharding-key`` expressions.
The summary is the last JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

try:
    import ferrymq_spark  # noqa: F401  (installed: pip install 'ferrymq[spark]', or the Spark image)
except ImportError:  # run from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FORMATS = ("parquet", "json", "csv", "orc")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="publish_to_topic.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR"), help="name server(s), host:port[;host:port] "
                   "(default: $NAMESRV_ADDR)")
    p.add_argument("--topic", required=True, help="the topic the rows go to")
    p.add_argument("--input", required=True, help="the directory of input files (any Hadoop path Spark can read)")
    p.add_argument("--format", choices=FORMATS, default="parquet", help="the input files' format (default parquet)")
    p.add_argument("--schema", default=None, help="the input's schema as DDL ('id LONG, name STRING'); default: "
                   "read from the files there now")
    p.add_argument("--checkpoint", required=True, help="where the query keeps which files are published "
                   "(one per job, any Hadoop path)")
    p.add_argument("--body", default="to_json(struct(*))", help="SQL expression of the message body "
                   "(default: the row as JSON)")
    p.add_argument("--keys", default=None, help="SQL expression of the message keys (space-separated)")
    p.add_argument("--tags", default=None, help="SQL expression of the message tag")
    p.add_argument("--sharding-key", default=None, help="SQL expression of the sharding key: rows with one key "
                   "go to one queue, in order")
    p.add_argument("--transactional-id", default=None, help="the query's name for its transactions, the same at "
                   "every run (default publish-<topic>)")
    p.add_argument("--max-files-per-batch", type=int, default=None, help="files per micro-batch (default: Spark's)")
    p.add_argument("--master", default=None, help="Spark master, e.g. local[2] (default: what spark-submit set)")
    p.add_argument("--set", dest="client_settings", action="append", default=[], metavar="KEY=VALUE",
                   help="client setting, e.g. apiTimeout=10 (repeatable)")
    args = p.parse_args(argv)
    if not args.namesrv:
        p.error("--namesrv is required (or set NAMESRV_ADDR)")
    for item in args.client_settings:
        if "=" not in item:
            p.error(f"--set expects KEY=VALUE, got {item!r}")
    return args


def columns(args: argparse.Namespace) -> list[str]:
    """The sink's columns as SQL expressions over the input's."""
    out = [f"CAST(({args.body}) AS STRING) AS body"]
    for expression, column in ((args.keys, "keys"), (args.tags, "tags"), (args.sharding_key, "shardingKey")):
        if expression:
            out.append(f"CAST(({expression}) AS STRING) AS {column}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.errors import AnalysisException

    from ferrymq_spark import FerryMQDataSource
    from ferrymq_spark.job_session import configure_job_logging, start_session

    configure_job_logging()
    spark = start_session(f"ferrymq-publish-{args.topic}", args.master)
    try:
        spark.dataSource.register(FerryMQDataSource)
        schema = args.schema
        if schema is None:
            try:
                schema = spark.read.format(args.format).load(args.input).schema
            except AnalysisException as e:  # no file yet (or no directory): nothing to publish
                print(json.dumps({"topic": args.topic, "batches": 0, "rows": 0, "note": str(e).splitlines()[0]}))
                return 0
        reader = spark.readStream.format(args.format).schema(schema)
        if args.max_files_per_batch:
            reader = reader.option("maxFilesPerTrigger", args.max_files_per_batch)
        rows = reader.load(args.input).selectExpr(*columns(args))
        writer = (rows.writeStream.format("ferrymq").option("namesrv", args.namesrv).option("topic", args.topic)
                  .option("transactionalId", args.transactional_id or f"publish-{args.topic}")
                  .option("checkpointLocation", args.checkpoint).trigger(availableNow=True))
        for item in args.client_settings:
            key, _, value = item.partition("=")
            writer = writer.option(f"ferrymq.{key.strip()}", value.strip())
        query = writer.start()
        # Rows per batch id, gathered while it runs: recentProgress keeps only the last 100 batches.
        rows: dict[int, int] = {}
        while True:
            done = query.awaitTermination(0.5)
            rows.update((p["batchId"], p["numInputRows"]) for p in query.recentProgress)
            if done:
                break
        summary = {"topic": args.topic, "batches": sum(1 for n in rows.values() if n), "rows": sum(rows.values())}
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
