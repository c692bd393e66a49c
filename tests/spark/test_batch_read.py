"""Batch reads through ``spark.read.format("ferrymq")`` against a real broker process."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.protocol import MessageQueue
from ferrymq_spark import OptionsError, commit_offsets, plan_batch

from testkit.spark import create_topic, produce
from testkit.processes import StandaloneProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOTAL = 100_000
QUEUES = 8


def read(spark, namesrv: str, topic: str, **options):
    return spark.read.format("ferrymq").options(**{"namesrv": namesrv, "subscribe": topic, **options}).load()


@pytest.mark.slow  # 25 s or more (make test-slow)
def test_100k_messages_over_8_queues_read_exactly_once_and_byte_identical(spark, broker_process):
    from pyspark.sql import functions as F

    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "SparkBig", QUEUES))
    sent = asyncio.run(produce(namesrv, "SparkBig", TOTAL, queues=QUEUES, batch=128))
    assert {s.queue_id for s in sent} == set(range(QUEUES))

    df = read(spark, namesrv, "SparkBig")
    rows = (df.select("msgId", "queueId", "queueOffset", "keys", "tags", F.length("body").alias("size"),
                      F.sha2("body", 256).alias("sha256"), F.col("properties")["app"].alias("app"),
                      "topic", "brokerName")
            .collect())

    assert len(rows) == TOTAL
    by_id = {r.msgId: r for r in rows}
    assert len(by_id) == TOTAL, "a message was read twice"
    for s in sent:
        r = by_id[s.msg_id]  # every acknowledged message is there
        assert (r.queueId, r.queueOffset, r.size, r.sha256, r.keys) == (s.queue_id, s.queue_offset, s.size, s.sha256, s.keys)
    assert {(r.topic, r.brokerName, r.app) for r in rows} == {("SparkBig", "broker-a", "spark-test")}
    # One input partition per queue: the planned ranges, not more.
    assert df.rdd.getNumPartitions() == QUEUES


def test_min_partitions_splits_large_ranges_and_ranges_are_fixed_at_planning(spark, broker_process):
    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "SparkSplit", 2))
    sent = asyncio.run(produce(namesrv, "SparkSplit", 3000, queues=2, batch=100))

    df = read(spark, namesrv, "SparkSplit", minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    ids = [r.msgId for r in df.select("msgId").collect()]
    assert sorted(ids) == sorted(s.msg_id for s in sent)  # split ranges: every message once

    # The ranges are those of planning time, whatever arrives before the tasks read them.
    # (Driven through the reader object, as Spark does: planning on the driver, read() per task.)
    from ferrymq_spark.options import parse_options
    from ferrymq_spark.source import FerryMQBatchReader
    reader = FerryMQBatchReader(parse_options({"namesrv": namesrv, "subscribe": "SparkSplit", "minPartitions": "7"}))
    asyncio.run(produce(namesrv, "SparkSplit", 500, queues=2, batch=100, seed=8))  # after planning
    read_ids = [i for p in reader.partitions() for b in reader.read(p) for i in b.column("msgId").to_pylist()]
    assert sorted(read_ids) == sorted(s.msg_id for s in sent)


def read_in_process(namesrv: str, topic: str, monkeypatch) -> tuple[list[str], list[int]]:
    """The source's reader driven as Spark drives it (plan, then read() per partition), in this
    process: the msgIds read, and how many messages each PULL_MESSAGE answered."""
    from ferrymq_spark.options import parse_options
    from ferrymq_spark.source import FerryMQBatchReader
    answered: list[int] = []
    original = PullConsumer.pull

    async def counting_pull(self, mq, offset, **kwargs):
        result = await original(self, mq, offset, **kwargs)
        answered.append(result.next_begin_offset - offset)
        return result

    monkeypatch.setattr(PullConsumer, "pull", counting_pull)
    reader = FerryMQBatchReader(parse_options({"namesrv": namesrv, "subscribe": topic}))
    ids = [i for p in reader.partitions() for b in reader.read(p) for i in b.column("msgId").to_pylist()]
    return ids, answered


def test_a_broker_tuned_for_bulk_reads_answers_each_chunk_in_one_pull(broker_process, tmp_path, monkeypatch):
    from ferrymq_spark.options import BULK_READ_BROKER_SETTINGS
    settings = [f"{key}={value}" for key, value in BULK_READ_BROKER_SETTINGS.items()]
    tuned = StandaloneProcess(tmp_path / "store", settings=settings).start()
    try:
        for process in (tuned, broker_process):
            namesrv = process.namesrv_addr
            asyncio.run(create_topic(namesrv, "SparkBulk", 1))
            sent = asyncio.run(produce(namesrv, "SparkBulk", 3000, queues=1, batch=100, min_size=512, max_size=512))
            ids, answered = read_in_process(namesrv, "SparkBulk", monkeypatch)
            assert sorted(ids) == sorted(s.msg_id for s in sent)  # every message once, either way
            if process is tuned:  # 1024 offsets per chunk, each chunk in one round trip
                assert sorted(answered) == [952, 1024, 1024]  # chunks may finish in any order
            else:  # RocketMQ's cap, 32 per pull: the chunks pull again for the rest
                assert len(answered) == 94 and max(answered) == 32
    finally:
        tuned.stop()


def test_group_run_after_commit_reads_only_what_arrived_since(spark, broker_process):
    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "SparkGroup", 4))
    first = asyncio.run(produce(namesrv, "SparkGroup", 2000, queues=4, batch=64, seed=1))
    options = {"namesrv": namesrv, "subscribe": "SparkGroup", "consumerGroup": "lake-loader",
               "startingOffsets": "group"}

    plan = plan_batch(options)  # nothing committed yet: the group starts at the earliest offsets
    assert plan.message_count == 2000
    got = spark.read.format("ferrymq").options(**plan.reader_options()).load().select("msgId").collect()
    assert sorted(r.msgId for r in got) == sorted(s.msg_id for s in first)
    commit_offsets(plan)  # after the output is "written"

    committed = asyncio.run(_committed(namesrv, "lake-loader", "SparkGroup", 4))
    assert committed == {q: plan.end[("SparkGroup", "broker-a", q)] for q in range(4)}

    second = asyncio.run(produce(namesrv, "SparkGroup", 700, queues=4, batch=50, seed=2))
    rows = read(spark, namesrv, "SparkGroup", consumerGroup="lake-loader", startingOffsets="group") \
        .select("msgId").collect()
    assert sorted(r.msgId for r in rows) == sorted(s.msg_id for s in second)


async def _committed(namesrv: str, group: str, topic: str, queues: int) -> dict[int, int]:
    async with PullConsumer(group, namesrv_addr=namesrv) as consumer:
        return {q: await consumer.committed(MessageQueue(topic, "broker-a", q)) for q in range(queues)}


def test_json_offsets_timestamps_and_bad_options(spark, broker_process):
    from pyspark.errors import PySparkException

    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "SparkJson", 2))
    sent = asyncio.run(produce(namesrv, "SparkJson", 400, queues=2, batch=50, seed=3))

    start = json.dumps({"SparkJson": {"broker-a": {"0": 10, "1": -2}}})
    end = json.dumps({"SparkJson": {"broker-a": {"0": 20, "1": -1}}})
    rows = read(spark, namesrv, "SparkJson", startingOffsets=start, endingOffsets=end) \
        .select("queueId", "queueOffset").collect()
    expected = {(0, o) for o in range(10, 20)} | {(s.queue_id, s.queue_offset) for s in sent if s.queue_id == 1}
    assert {(r.queueId, r.queueOffset) for r in rows} == expected and len(rows) == len(expected)

    # startingTimestamp after every store time: nothing to read.
    late = read(spark, namesrv, "SparkJson", startingTimestamp=str(2**42)).count()
    assert late == 0
    assert read(spark, namesrv, "SparkJson", startingTimestamp="0").count() == 400

    with pytest.raises(PySparkException, match="option subscribe is required"):
        spark.read.format("ferrymq").option("namesrv", namesrv).load().count()
    with pytest.raises(PySparkException, match="unknown option 'startingoffset'"):
        read(spark, namesrv, "SparkJson", startingOffset="earliest").count()
    with pytest.raises(PySparkException, match="is beyond the queue's latest offset"):
        read(spark, namesrv, "SparkJson", endingOffsets=json.dumps({"SparkJson": {"broker-a": {"0": 10_000}}})).count()
    with pytest.raises(OptionsError, match="startingOffsets=group needs the option consumerGroup"):
        plan_batch({"namesrv": namesrv, "subscribe": "SparkJson", "startingOffsets": "group"})
