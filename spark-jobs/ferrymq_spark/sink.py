"""``df.write.format("ferrymq")`` and ``df.writeStream.format("ferrymq")``: the sink, exactly
once per batch (the protocol: sink_commit.py; the columns: sink_rows.py).

Spark runs ``write()`` in Python workers on the executors (the writer object is pickled there)
and ``commit()``/``abort()`` in a Python process on the driver, so a writer holds only plain
options and ids; each call opens the clients it needs (:class:`SinkClient`) and closes them.
A batch write (``df.write``) is one batch of its own (its id made when the write starts); a
streaming query's batches are Spark's micro-batch ids, which survive a restart of the query
from its checkpoint, and ``transactionalId`` names the query across restarts.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from itertools import islice
from typing import Iterable, Iterator

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ferrymq.client.admin import AdminClient
from ferrymq.client.transaction_producer import HalfMessage, TransactionProducer

from ferrymq_spark.loop_thread import LoopThread
from ferrymq_spark.sink_commit import (ROLLBACK, TXN_PROPERTY, TaskOutcome, TaskTag, commit_batch, decide_check,
                                       write_manifest)
from ferrymq_spark.sink_options import SinkOptions
from ferrymq_spark.sink_rows import OutgoingRow, check_schema, outgoing, queue_for

log = logging.getLogger(__name__)

# Set by Spark's micro-batch execution on every task of a batch (StreamExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def batched(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    it = iter(items)
    while part := list(islice(it, size)):
        yield part


class SinkCommitMessage(WriterCommitMessage):
    def __init__(self, outcome: TaskOutcome) -> None:
        self.outcome = outcome


class SinkClient:
    """A transactional producer of the sink's group and an admin client, on a loop thread;
    the producer answers the broker's checks of the sink's half messages for ``run``."""

    def __init__(self, opts: SinkOptions, run: str) -> None:
        self.loop = LoopThread("ferrymq-spark-sink")
        self.admin = AdminClient(config=opts.client_config())

        async def check(msg):
            return await decide_check(self.admin, opts.commit_topic, run, msg)

        self.producer = TransactionProducer(opts.producer_group, check_listener=check, config=opts.client_config(),
                                            send_timeout=opts.send_timeout_ms / 1000)
        try:
            self.loop.call(self.producer.start())
        except BaseException:
            self.loop.stop()
            raise

    def close(self) -> None:
        try:
            self.loop.call(self.producer.close())
            self.loop.call(self.admin.close())
        finally:
            self.loop.stop()

    def __enter__(self) -> "SinkClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _message_outcomes(messages) -> list[TaskOutcome]:
    return [m.outcome for m in messages if isinstance(m, SinkCommitMessage)]


def write_task(opts: SinkOptions, run: str, batch: str, rows: Iterator) -> SinkCommitMessage:
    """One task: its rows as half messages, then their manifest. The rows go to the client's loop
    in batches of ``batchSize`` (a hand-over per row between the task's thread and the loop would
    cost more than the send), ``maxInFlight`` batches at once; a batch is a request per queue its
    rows go to (FerryMQ's SEND_HALF_MESSAGES)."""
    ctx = TaskContext.get()
    tag = TaskTag(opts.transactional_id, run, batch, ctx.partitionId() if ctx else 0, ctx.taskAttemptId() if ctx else 0)
    with SinkClient(opts, run) as client:
        queues: dict[str, list] = {}
        ordered = False

        async def prepare(outs: list[OutgoingRow]) -> list[HalfMessage]:
            by_queue: dict[tuple, list[int]] = {}  # (topic, queue or None: the producer's pick) -> rows
            for i, out in enumerate(outs):
                topic = out.message.topic
                if out.chooses_queue and topic not in queues:
                    queues[topic] = await client.producer.publish_queues(topic)
                by_queue.setdefault((topic, queue_for(out, queues.get(topic, []))), []).append(i)
            halves: list = [None] * len(outs)

            async def one(queue, indices: list[int]) -> None:
                stored = await client.producer.prepare_many([outs[i].message for i in indices], queue=queue)
                for i, half in zip(indices, stored):
                    halves[i] = half
            await asyncio.gather(*(one(queue, indices) for (_, queue), indices in by_queue.items()))
            return halves

        def batches() -> Iterator:
            nonlocal ordered
            tag_text = str(tag)
            for part in batched(rows, opts.batch_size):
                outs = [outgoing(row, opts.topic) for row in part]
                for out in outs:
                    out.message.properties[TXN_PROPERTY] = tag_text
                    ordered = ordered or out.chooses_queue
                yield lambda outs=outs: prepare(outs)

        halves = [h for part in client.loop.pipelined(batches(), opts.max_in_flight) for h in part]
        parts = client.loop.call(write_manifest(client.producer, opts.commit_topic, tag, halves))
    return SinkCommitMessage(TaskOutcome(tag, halves, parts, ordered))


def commit(opts: SinkOptions, run: str, batch: str, messages) -> None:
    with SinkClient(opts, run) as client:
        done = client.loop.call(commit_batch(client.producer, client.admin, opts.commit_topic, opts.transactional_id,
                                             run, batch, _message_outcomes(messages)))
    log.info("ferrymq sink: batch %s of %s: %s", batch, opts.transactional_id or "a batch write", done)


def abort(opts: SinkOptions, run: str, messages) -> None:
    halves = [h for o in _message_outcomes(messages) for h in o.halves]
    with SinkClient(opts, run) as client:
        client.loop.call(client.producer.end_many(halves, ROLLBACK))


class FerryMQBatchWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_schema(schema, opts.topic)
        self.opts = opts
        self.run = uuid.uuid4().hex
        self.batch = f"write-{self.run}"

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        return write_task(self.opts, self.run, self.batch, iterator)

    def commit(self, messages: list) -> None:
        commit(self.opts, self.run, self.batch, messages)

    def abort(self, messages: list) -> None:
        abort(self.opts, self.run, messages)


class FerryMQStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_schema(schema, opts.topic)
        self.opts = opts
        self.run = uuid.uuid4().hex  # this start of the query

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        ctx = TaskContext.get()
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        if batch is None:
            raise RuntimeError(f"the task carries no {BATCH_ID_PROPERTY}: not a micro-batch of a streaming query")
        return write_task(self.opts, self.run, batch, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        commit(self.opts, self.run, str(batchId), messages)

    def abort(self, messages: list, batchId: int) -> None:
        abort(self.opts, self.run, messages)
