"""Streaming reads: a file sink with a checkpoint, stopped mid-way and restarted."""

from __future__ import annotations

import asyncio

import pyspark
import pytest

from testkit.spark import create_topic, produce
from tests.spark.test_batch_read import _committed
from testkit.wait import poll_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

OLD_SPARK = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2)


def start_query(spark, namesrv: str, out, checkpoint, **options):
    stream = (spark.readStream.format("ferrymq")
              .options(**{"namesrv": namesrv, "subscribe": "SparkStream", "startingOffsets": "earliest",
                          "consumerGroup": "stream-loader", **options})
              .load()
              .selectExpr("msgId", "queueId", "queueOffset", "sha2(body, 256) AS sha256"))
    return (stream.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_stream_stopped_and_restarted_from_checkpoint_writes_each_message_once(spark, broker_process, tmp_path):
    namesrv = broker_process.namesrv_addr
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    asyncio.run(create_topic(namesrv, "SparkStream", 4))
    first = asyncio.run(produce(namesrv, "SparkStream", 400, queues=4, batch=40, seed=10))

    query = start_query(spark, namesrv, out, checkpoint, maxOffsetsPerTrigger="200")
    try:
        rows = lambda: sum(p["numInputRows"] for p in query.recentProgress)  # noqa: E731
        poll_until("the first 400 rows streamed", lambda: rows() >= 400, 120, 0.1)
        first += asyncio.run(produce(namesrv, "SparkStream", 2000, queues=4, batch=40, seed=11))
        # Stop once two more micro-batches are in the sink, eight before the 2400 messages are.
        poll_until("800 rows streamed", lambda: rows() >= 800, 120, 0.1)
        progress = list(query.recentProgress)
        if OLD_SPARK:  # Spark < 4.2 tells the source no start offset: its first batch is not limited
            progress = progress[1:]
        assert all(p["numInputRows"] <= 200 for p in progress), "maxOffsetsPerTrigger was not honoured"
    finally:
        query.stop()
    assert query.exception() is None
    mid_way = spark.read.parquet(str(out)).count()
    assert 800 <= mid_way < 2400

    second = asyncio.run(produce(namesrv, "SparkStream", 1000, queues=4, batch=40, seed=12))
    query = start_query(spark, namesrv, out, checkpoint)  # same checkpoint: resumes where it stopped
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    rows = spark.read.parquet(str(out)).collect()  # the file sink's log: committed batches only
    expected = {s.msg_id: (s.queue_id, s.queue_offset, s.sha256) for s in first + second}
    assert len(rows) == len(expected), f"{len(rows) - len(expected)} extra rows"
    assert {r.msgId: (r.queueId, r.queueOffset, r.sha256) for r in rows} == expected

    # Each finished micro-batch committed its end offsets to the group: no lag left.
    committed = asyncio.run(_committed(namesrv, "stream-loader", "SparkStream", 4))
    ends = {q: max(s.queue_offset for s in first + second if s.queue_id == q) + 1 for q in range(4)}
    poll_until(f"group offsets {committed} reaching {ends}",
               lambda: asyncio.run(_committed(namesrv, "stream-loader", "SparkStream", 4)) == ends, 30, 0.1)
