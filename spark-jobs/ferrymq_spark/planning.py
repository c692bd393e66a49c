"""Driver side: turn the options into concrete offsets per queue, once, when a query is
planned. The same functions serve the batch reader, the streaming reader, the commit helper
and the drain job, so all of them agree on what "earliest", "group" or a JSON offset means."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from ferrymq_spark.blocking_client import BlockingConsumer
from ferrymq_spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    OffsetsError,
    QueueKey,
    offsets_from_json,
    offsets_to_json,
    queue_label,
    ranges_between,
    split_ranges,
)
from ferrymq_spark.options import SourceOptions, parse_options
from ferrymq_spark.queue_reader import data_loss


def open_client(opts: SourceOptions) -> BlockingConsumer:
    return BlockingConsumer(opts.consumer_group, opts.client_config())


@dataclass
class QueueBounds:
    keys: list[QueueKey]
    min: Offsets
    max: Offsets

    @classmethod
    def fetch(cls, client: BlockingConsumer, topics) -> "QueueBounds":
        keys = client.queues(topics)
        return cls(keys, client.min_offsets(keys), client.max_offsets(keys))


def _from_words_or_json(value: str, bounds: QueueBounds, default: int, what: str) -> Offsets:
    """earliest / latest / JSON (-2, -1 and missing queues resolved against the bounds)."""
    word = value.lower()
    if word == "earliest":
        return dict(bounds.min)
    if word == "latest":
        return dict(bounds.max)
    given = offsets_from_json(value, what)
    unknown = sorted(set(given) - set(bounds.keys))
    if unknown:
        raise OffsetsError(f"{what} names {queue_label(unknown[0])}, which is not a queue of the subscribed topics")
    out = {}
    for key in bounds.keys:
        offset = given.get(key, default)
        out[key] = bounds.min[key] if offset == EARLIEST else bounds.max[key] if offset == LATEST else offset
    return out


def resolve_start(client: BlockingConsumer, opts: SourceOptions, bounds: QueueBounds) -> Offsets:
    """Where reading begins, before the data-loss check."""
    if opts.starting_timestamp is not None:  # takes precedence, as in the Kafka source
        return client.offsets_for_timestamp(bounds.keys, opts.starting_timestamp)
    if opts.starting_offsets.lower() == "group":
        committed = client.committed_offsets(bounds.keys)
        # Queues the group never committed start at the earliest offset.
        return {k: committed[k] if committed[k] >= 0 else bounds.min[k] for k in bounds.keys}
    return _from_words_or_json(opts.starting_offsets, bounds, EARLIEST, "startingOffsets")


def check_start(start: Mapping[QueueKey, int], bounds: QueueBounds, fail_on_data_loss: bool,
                source: str) -> Offsets:
    """Offsets below a queue's minimum were removed by retention: fail or skip to the minimum.
    Offsets above its maximum (a broker that lost its tail) are brought back to the maximum."""
    out = {}
    for key in bounds.keys:
        offset = start.get(key, bounds.min[key])
        low, high = bounds.min[key], bounds.max[key]
        if offset < low:
            data_loss(fail_on_data_loss, f"{queue_label(key)}: {source} offset {offset} is below the queue's minimum "
                                         f"{low}; messages {offset}..{low - 1} were removed by retention")
            offset = low
        out[key] = min(offset, high)
    return out


def resolve_end(opts: SourceOptions, bounds: QueueBounds, start: Mapping[QueueKey, int]) -> Offsets:
    end = _from_words_or_json(opts.ending_offsets, bounds, LATEST, "endingOffsets")
    for key, offset in end.items():
        if offset > bounds.max[key]:
            raise OffsetsError(f"endingOffsets {offset} of {queue_label(key)} is beyond the queue's latest offset "
                               f"{bounds.max[key]}")
        if offset < start[key]:
            raise OffsetsError(f"endingOffsets {offset} of {queue_label(key)} is before its starting offset {start[key]}")
    return end


@dataclass
class BatchPlan:
    """What a batch read will read: fixed offsets per queue, resolved once."""

    options: SourceOptions
    start: Offsets
    end: Offsets

    def ranges(self) -> list[OffsetRange]:
        return ranges_between(self.start, self.end)

    def partitions(self) -> list[OffsetRange]:
        return split_ranges(self.ranges(), self.options.min_partitions)

    @property
    def message_count(self) -> int:
        return sum(r.size for r in self.ranges())

    def starting_json(self) -> dict:
        return offsets_to_json(self.start)

    def ending_json(self) -> dict:
        return offsets_to_json(self.end)

    def reader_options(self) -> dict[str, str]:
        """Options for ``spark.read.format("ferrymq")`` that read exactly this plan."""
        o = self.options
        out = {"subscribe": ",".join(o.topics), "namesrv": o.namesrv,
               "startingOffsets": json.dumps(self.starting_json()), "endingOffsets": json.dumps(self.ending_json()),
               "failOnDataLoss": str(o.fail_on_data_loss).lower()}
        if o.group_given:
            out["consumerGroup"] = o.consumer_group
        if o.min_partitions:
            out["minPartitions"] = str(o.min_partitions)
        out.update({f"ferrymq.{k}": v for k, v in o.client_settings.items()})
        return out


def plan_with(client: BlockingConsumer, opts: SourceOptions) -> BatchPlan:
    bounds = QueueBounds.fetch(client, opts.topics)
    source = "committed" if opts.starting_offsets.lower() == "group" else "starting"
    start = check_start(resolve_start(client, opts, bounds), bounds, opts.fail_on_data_loss, source)
    return BatchPlan(opts, start, resolve_end(opts, bounds, start))


def plan_batch(options: Mapping[str, str] | SourceOptions) -> BatchPlan:
    """Resolve a batch read's offsets now, e.g. to derive an output path from them and to
    commit exactly them once the output is written (see :func:`ferrymq_spark.commit_offsets`)."""
    opts = options if isinstance(options, SourceOptions) else parse_options(options)
    with open_client(opts) as client:
        return plan_with(client, opts)
