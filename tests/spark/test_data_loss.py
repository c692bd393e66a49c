"""failOnDataLoss: a group's committed offset below the queue's minimum.

The minimum is raised for real: the broker is stopped, its oldest CommitLog segment deleted
(what retention does), and it is started again on the same directory; the store then
answers OFFSET_TOO_SMALL below the new minimum.
"""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.protocol import MessageQueue
from ferrymq_spark import DataLossError, commit_offsets, plan_batch

from testkit.spark import create_topic, produce
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SEGMENT = 256 * 1024


async def _bounds(namesrv: str, topic: str, queues: int) -> dict[int, tuple[int, int]]:
    async with PullConsumer("probe", namesrv_addr=namesrv) as c:
        return {q: (await c.min_offset(MessageQueue(topic, "broker-a", q)), await c.max_offset(MessageQueue(topic, "broker-a", q)))
                for q in range(queues)}


@pytest.fixture
def trimmed_broker(tmp_path):
    """A broker whose queues lost their oldest messages; the group committed offset 5 before."""
    settings = [f"mappedFileSizeCommitLog={SEGMENT}"]
    store = tmp_path / "store"
    first = StandaloneProcess(store, list(settings)).start()
    processes = [first]
    try:
        asyncio.run(create_topic(first.namesrv_addr, "SparkLoss", 2))
        asyncio.run(produce(first.namesrv_addr, "SparkLoss", 1200, queues=2, batch=50, min_size=1000, max_size=1000))
        commit_offsets({"SparkLoss": {"broker-a": {"0": 5, "1": 5}}}, namesrv=first.namesrv_addr,
                       consumer_group="lossy")
        assert first.stop() == 0
        segments = sorted((store / "commitlog").iterdir())
        assert len(segments) > 2
        segments[0].unlink()  # as retention would
        second = StandaloneProcess(store, list(settings)).start()
        processes.append(second)
        yield second
    finally:
        for p in processes:
            p.stop()


def test_committed_offset_below_the_minimum(spark, trimmed_broker):
    namesrv = trimmed_broker.namesrv_addr
    bounds = asyncio.run(_bounds(namesrv, "SparkLoss", 2))
    assert all(5 < low < high for low, high in bounds.values()), bounds
    options = {"namesrv": namesrv, "subscribe": "SparkLoss", "consumerGroup": "lossy", "startingOffsets": "group"}

    # failOnDataLoss=true (the default): a clear error, on the driver, before any task runs.
    with pytest.raises(DataLossError, match=r"SparkLoss@broker-a#0: committed offset 5 is below the queue's minimum"):
        plan_batch(options)
    from pyspark.errors import PySparkException
    with pytest.raises(PySparkException, match="FerryMQ data loss: SparkLoss@broker-a#.: committed offset 5 is below"):
        spark.read.format("ferrymq").options(**options).load().count()

    # failOnDataLoss=false: skip ahead to the minimum and read everything still there, once.
    rows = spark.read.format("ferrymq").options(**options, failOnDataLoss="false").load() \
        .select("queueId", "queueOffset").collect()
    expected = {(q, o) for q, (low, high) in bounds.items() for o in range(low, high)}
    assert len(rows) == len(expected)
    assert {(r.queueId, r.queueOffset) for r in rows} == expected


def test_messages_removed_between_planning_and_reading(tmp_path):
    """The executors' side: ranges planned while the messages were there, read after retention
    removed the oldest of them (the broker restarts on the same ports, as a pod would)."""
    from ferrymq_spark.options import parse_options
    from ferrymq_spark.source import FerryMQBatchReader

    store, ports = tmp_path / "store", {"namesrv_port": free_port(), "broker_port": free_port()}
    settings = [f"mappedFileSizeCommitLog={SEGMENT}"]
    broker = StandaloneProcess(store, list(settings), **ports).start()
    try:
        asyncio.run(create_topic(broker.namesrv_addr, "SparkLate", 1))
        asyncio.run(produce(broker.namesrv_addr, "SparkLate", 600, queues=1, batch=50, min_size=1000, max_size=1000))
        options = {"namesrv": broker.namesrv_addr, "subscribe": "SparkLate"}
        strict = FerryMQBatchReader(parse_options(options))
        lenient = FerryMQBatchReader(parse_options({**options, "failOnDataLoss": "false"}))
        assert [(r.start, r.end) for r in strict.planned] == [(0, 600)]
        assert broker.stop() == 0
        sorted((store / "commitlog").iterdir())[0].unlink()
        broker = StandaloneProcess(store, list(settings), **ports).start()
        [(low, high)] = asyncio.run(_bounds(broker.namesrv_addr, "SparkLate", 1)).values()
        assert 0 < low < high == 600

        [partition] = strict.partitions()
        with pytest.raises(DataLossError, match=rf"SparkLate@broker-a#0: offsets 0..{low - 1} were removed from the queue"):
            list(strict.read(partition))
        [partition] = lenient.partitions()
        offsets = [o for batch in lenient.read(partition) for o in batch.column("queueOffset").to_pylist()]
        assert offsets == list(range(low, 600))
    finally:
        broker.stop()
