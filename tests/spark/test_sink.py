"""The sink: a DataFrame and a stream written to FerryMQ (real Spark, local mode; a real broker),
each row exactly once, in order per sharding key; a batch Spark runs again after a crash that
followed the sink's commit (its commit log lacks the batch) is not written twice."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq_spark.sink_options import DEFAULT_COMMIT_TOPIC
from tests.consumer_support import read_all
from testkit.spark import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def topics(namesrv: str, *names: str) -> None:
    for name in (*names, DEFAULT_COMMIT_TOPIC):
        asyncio.run(create_topic(namesrv, name, 4))


def written(namesrv: str, topic: str) -> list:
    return asyncio.run(read_all(namesrv, topic, group=f"check-{topic}"))


def test_a_dataframe_is_written_once_per_row_with_its_columns_and_in_order_per_sharding_key(
        spark, broker_process):
    namesrv = broker_process.namesrv_addr
    topics(namesrv, "SinkBatch")
    rows = [{"body": f"order {i}".encode(), "keys": f"order-{i}", "tags": "paid" if i % 2 else "new",
             "properties": {"region": "eu" if i % 3 else "us"}, "shardingKey": f"customer-{i % 5}"}
            for i in range(600)]
    df = spark.createDataFrame(rows, "body binary, keys string, tags string, properties map<string,string>, "
                                     "shardingKey string").repartition(3)
    df.write.format("ferrymq").mode("append").option("namesrv", namesrv).option("topic", "SinkBatch").save()

    msgs = written(namesrv, "SinkBatch")
    assert Counter(m.keys[0] for m in msgs) == Counter(f"order-{i}" for i in range(600))  # each once
    by_key = {m.keys[0]: m for m in msgs}
    assert all(by_key[f"order-{i}"].body == f"order {i}".encode() and
               by_key[f"order-{i}"].tags == ("paid" if i % 2 else "new") and
               by_key[f"order-{i}"].properties["region"] == ("eu" if i % 3 else "us") for i in range(600))
    # One customer's orders all in one queue; within it, in the order of its partitions' rows.
    queues_of = {}
    for m in msgs:
        queues_of.setdefault(int(m.keys[0].split("-")[1]) % 5, set()).add(m.queue_id)
    assert all(len(q) == 1 for q in queues_of.values())


def test_rows_in_the_order_of_a_partition_reach_their_queue_in_that_order(spark, broker_process):
    namesrv = broker_process.namesrv_addr
    topics(namesrv, "SinkOrder")
    df = spark.createDataFrame([(f"{i}", "k") for i in range(300)], "body string, shardingKey string").coalesce(1)
    df.write.format("ferrymq").mode("append").option("namesrv", namesrv).option("topic", "SinkOrder").save()
    msgs = sorted(written(namesrv, "SinkOrder"), key=lambda m: m.queue_offset)
    assert [int(m.body) for m in msgs] == list(range(300))


def test_a_column_the_sink_would_drop_is_refused_before_anything_is_written(spark, broker_process, tmp_path):
    namesrv = broker_process.namesrv_addr
    topics(namesrv, "SinkRefused")
    df = spark.createDataFrame([("x", 1)], "body string, price int")
    with pytest.raises(Exception, match="column 'price' is not written by the ferrymq sink"):
        df.write.format("ferrymq").mode("append").option("namesrv", namesrv).option("topic", "SinkRefused").save()
    query = (spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS body")
             .writeStream.format("ferrymq").option("namesrv", namesrv).option("topic", "SinkRefused")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(Exception, match="transactionalId is required"):  # the query stops at its start
        query.awaitTermination(120)
    assert written(namesrv, "SinkRefused") == []


def start_stream(spark, namesrv: str, source, checkpoint):
    stream = spark.readStream.schema("id INT").json(str(source)).selectExpr(
        "CAST(id AS STRING) AS body", "CONCAT('row-', id) AS keys")
    return (stream.writeStream.format("ferrymq").option("namesrv", namesrv).option("topic", "SinkStream")
            .option("transactionalId", "sink-stream-test").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def test_a_stream_writes_each_row_once_even_when_spark_runs_a_committed_batch_again(spark, broker_process,
                                                                                    tmp_path):
    namesrv = broker_process.namesrv_addr
    topics(namesrv, "SinkStream")
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    source.mkdir()
    (source / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(500)))
    query = start_stream(spark, namesrv, source, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(m.keys[0] for m in written(namesrv, "SinkStream")) == Counter(f"row-{i}" for i in range(500))

    # The state a driver killed right after the sink committed batch 1 leaves: the rows are in
    # the topic, Spark's commit log does not have the batch, so the restarted query runs it again.
    (source / "b.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(500, 800)))
    query = start_stream(spark, namesrv, source, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the entry and its checksum, as if never written
        (checkpoint / "commits" / name).unlink()
    query = start_stream(spark, namesrv, source, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert query.lastProgress is None or query.lastProgress["batchId"] == last, "the batch ran again"

    got = Counter(m.keys[0] for m in written(namesrv, "SinkStream"))
    assert got == Counter(f"row-{i}" for i in range(800)), "each row exactly once"
    markers = asyncio.run(_markers(namesrv, f"sink-stream-test/batch/{last}"))
    assert len(markers) == 1, "the batch was committed once; the second run found its marker"


async def _markers(namesrv: str, key: str) -> list:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        return await admin.query_messages(DEFAULT_COMMIT_TOPIC, key)
