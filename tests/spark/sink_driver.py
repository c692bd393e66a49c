"""A Spark driver of its own for the sink's crash test (test_sink_crash.py): a streaming query
from JSON files (one file per micro-batch) into a FerryMQ topic, run until every file is in.

    python tests/spark/sink_driver.py NAMESRV SOURCE_DIR CHECKPOINT_DIR TOPIC

Prints "batch N" lines as batches end, then "done"."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[2] / "spark-jobs")]

from testkit.spark import make_spark_session  # noqa: E402


def main(namesrv: str, source: str, checkpoint: str, topic: str) -> None:
    spark = make_spark_session("ferrymq-sink-crash")
    stream = (spark.readStream.schema("id LONG").option("maxFilesPerTrigger", 1).json(source)
              .selectExpr("CAST(id AS STRING) AS body", "CONCAT('row-', id) AS keys"))
    query = (stream.writeStream.format("ferrymq").option("namesrv", namesrv).option("topic", topic)
             .option("transactionalId", "sink-crash-test").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    seen = -1
    while not query.awaitTermination(0.5):
        progress = query.lastProgress
        if progress and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(f"batch {seen}", flush=True)
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
