"""Drain a FerryMQ consumer group's backlog into Parquet files partitioned by date.

    python spark-jobs/jobs/consume_to_parquet.py --master 'local[2]' \\
        --namesrv 127.0.0.1:9876 --group lake-loader --topics Orders,Payments --output /data/lake/orders

On Kubernetes the CronJob built from ``ConsumerGroup.spec.sparkJob`` runs it with
``spark-submit`` in client mode (no ``--master`` here then: spark-submit sets it).

Each run writes ``<output>/run=<id>/date=YYYY-MM-DD/*.parquet`` for fixed offset ranges, then
commits the group's offsets; a re-run after a failure finishes the interrupted run in the same
place before draining what arrived since (see ``ferrymq_spark.drain``). The summary is printed
as the last JSON line on stdout (under spark-submit, Python's stderr is merged into stdout); the
exit code is 0 when everything read was committed.
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="consume_to_parquet.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR"), help="name server(s), host:port[;host:port] "
                   "(default: $NAMESRV_ADDR)")
    p.add_argument("--group", required=True, help="consumer group whose committed offsets are the starting point")
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--output", required=True, help="output directory (any Hadoop path Spark can write)")
    p.add_argument("--master", default=None, help="Spark master, e.g. local[2] (default: what spark-submit set)")
    p.add_argument("--min-partitions", type=int, default=None, help="split large queue ranges into at least N tasks")
    p.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true",
                   help="fail when the group's offset fell below a queue's minimum (default true)")
    p.add_argument("--set", dest="client_settings", action="append", default=[], metavar="KEY=VALUE",
                   help="client setting, e.g. apiTimeout=10 (repeatable)")
    p.add_argument("--crash-after-write", action="store_true", help=argparse.SUPPRESS)  # fault injection (tests)
    args = p.parse_args(argv)
    if not args.namesrv:
        p.error("--namesrv is required (or set NAMESRV_ADDR)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ferrymq_spark import DataLossError, FerryMQDataSource, OffsetsError, OptionsError
    from ferrymq_spark.drain import drain
    from ferrymq_spark.job_session import configure_job_logging, start_session
    from ferrymq_spark.options import parse_options

    configure_job_logging()

    options = {"subscribe": args.topics, "namesrv": args.namesrv, "consumerGroup": args.group,
               "startingOffsets": "group", "failOnDataLoss": args.fail_on_data_loss}
    if args.min_partitions:
        options["minPartitions"] = str(args.min_partitions)
    for item in args.client_settings:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"consume_to_parquet: --set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        options[f"ferrymq.{key.strip()}"] = value.strip()
    try:
        opts = parse_options(options)
    except (OptionsError, OffsetsError) as e:
        print(f"consume_to_parquet: {e}", file=sys.stderr)
        return 2

    spark = start_session(f"ferrymq-drain-{args.group}", args.master)
    try:
        spark.dataSource.register(FerryMQDataSource)
        summary = drain(spark, opts, args.output, crash_after_write=args.crash_after_write)
    except DataLossError as e:
        print(f"consume_to_parquet: {e}", file=sys.stderr)
        return 3
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
