"""Executor side: read one planned offset range of one queue and hand it to Spark as
Arrow record batches. The range was fixed on the driver; this reads exactly [start, end).

The range is fetched in chunks of ``pullBatchSize`` offsets with ``pullPipelineDepth`` chunk
fetches in flight (offsets are dense, so every chunk's start is known in advance), and the
chunks are turned into rows in order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Iterator

import pyarrow as pa

from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.protocol import MessageQueue

from ferrymq_spark.blocking_client import BlockingConsumer
from ferrymq_spark.offsets import OffsetRange, queue_label
from ferrymq_spark.options import PullSettings
from ferrymq_spark.rows import BatchBuilder

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Messages Spark was asked to read are gone (retention, or a broker that lost its tail)."""


def data_loss(fail: bool, message: str) -> None:
    """Raise, or log and go on (failOnDataLoss=false), as the Kafka source does."""
    hint = "set failOnDataLoss=false to skip the missing messages" if fail else "skipping ahead (failOnDataLoss=false)"
    text = f"FerryMQ data loss: {message}; {hint}"
    if fail:
        raise DataLossError(text)
    log.warning(text)


@dataclass
class Chunk:
    start: int
    # raw pull bodies, each with the queue offsets it answers: [first, end)
    bodies: list[tuple[bytes, int, int]] = field(default_factory=list)
    removed_until: int | None = None  # the queue's minimum, when offsets from start on were removed
    problems: list[str] = field(default_factory=list)  # other offsets that are not on the broker


async def fetch_chunk(mq: MessageQueue, start: int, end: int, max_nums: int, consumer: PullConsumer) -> Chunk:
    """Every record of [start, end), undecoded, pulling again when a pull returns fewer (byte limits)."""
    chunk, offset = Chunk(start), start
    while offset < end:
        result = await consumer.pull(mq, offset, max_nums=min(max_nums, end - offset), raw=True)
        status, nxt = result.status, result.next_begin_offset
        if status is PullStatus.FOUND and nxt > offset:
            chunk.bodies.append((result.body, offset, min(nxt, end)))
            offset = nxt
        elif status is PullStatus.NO_MATCHED_MSG and nxt > offset:
            offset = nxt  # removed records skipped by the broker
        elif status is PullStatus.OFFSET_ILLEGAL and offset < nxt and nxt == result.min_offset:
            chunk.removed_until = nxt  # retention removed the head of the queue
            offset = nxt
        else:  # nothing at an offset the plan saw below the queue's end: the broker lost its tail
            chunk.problems.append(f"offsets {offset}..{end - 1} planned for this read are not on the broker "
                                  f"(pull answered {status.name}, queue min {result.min_offset}, max {result.max_offset})")
            break
    return chunk


def read_range(client: BlockingConsumer, r: OffsetRange, pull: PullSettings, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    label, mq = queue_label(r.key), MessageQueue(*r.key)
    step = pull.pull_batch_size
    skip_to = r.start  # raised past removed offsets, so later chunks start at the queue's minimum

    def calls():
        s = r.start
        while (s := max(s, skip_to)) < r.end:
            yield partial(fetch_chunk, mq, s, min(s + step, r.end), step)
            s += step

    builder = BatchBuilder(r.broker_name)
    for chunk in client.pipelined(calls(), pull.pull_pipeline_depth):
        if chunk.removed_until is not None and chunk.start >= skip_to:  # report each removed run once
            data_loss(fail_on_data_loss, f"{label}: offsets {chunk.start}..{min(chunk.removed_until, r.end) - 1} "
                                         f"were removed from the queue (its minimum is now {chunk.removed_until})")
        if chunk.removed_until is not None:
            skip_to = max(skip_to, chunk.removed_until)
        for problem in chunk.problems:
            data_loss(fail_on_data_loss, f"{label}: {problem}")
        for body, first, last in chunk.bodies:
            builder.add_records(body, first, last)
        if len(builder) >= pull.rows_per_batch:
            yield builder.flush()
    if len(builder):
        yield builder.flush()
