"""Offsets and offset ranges: the JSON users and Spark's checkpoints see, and how a
planned read is cut into input partitions. Pure functions, no client and no Spark.

Offsets are JSON nested per topic, broker and queue, like the Kafka source's per
topic/partition JSON but with the broker level RocketMQ queues need::

    {"Orders": {"broker-a": {"0": 120, "1": 98}}}

In ``startingOffsets`` / ``endingOffsets`` JSON, ``-2`` means the queue's earliest offset and
``-1`` its latest (the Kafka source's convention).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

EARLIEST = -2
LATEST = -1

# (topic, brokerName, queueId): one RocketMQ message queue.
QueueKey = tuple[str, str, int]
Offsets = dict[QueueKey, int]


class OffsetsError(ValueError):
    """Malformed offsets JSON (the message names what is wrong and where)."""


def offsets_to_json(offsets: Mapping[QueueKey, int]) -> dict:
    """{(topic, broker, queue): offset} -> nested JSON-ready dict, keys sorted."""
    out: dict = {}
    for (topic, broker, queue_id), offset in sorted(offsets.items()):
        out.setdefault(topic, {}).setdefault(broker, {})[str(queue_id)] = int(offset)
    return out


def offsets_from_json(value: str | Mapping, what: str = "offsets") -> Offsets:
    """Nested JSON (text or parsed) -> {(topic, broker, queue): offset}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise OffsetsError(f"{what} is not valid JSON ({e.msg} at char {e.pos}): {value[:200]!r}") from None
    if not isinstance(value, Mapping):
        raise OffsetsError(f"{what} must be a JSON object of topic -> broker -> queueId -> offset")
    out: Offsets = {}
    for topic, brokers in value.items():
        if not isinstance(brokers, Mapping):
            raise OffsetsError(f"{what}: topic {topic!r} must map broker names to {{queueId: offset}} objects")
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise OffsetsError(f"{what}: {topic}/{broker} must map queue ids to offsets")
            for queue_id, offset in queues.items():
                try:
                    key = (str(topic), str(broker), int(queue_id))
                except ValueError:
                    raise OffsetsError(f"{what}: queue id {queue_id!r} of {topic}/{broker} is not an integer") from None
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise OffsetsError(f"{what}: offset {offset!r} of {topic}/{broker}/{queue_id} must be an integer >= -2")
                out[key] = offset
    return out


def queue_label(key: QueueKey) -> str:
    topic, broker, queue_id = key
    return f"{topic}@{broker}#{queue_id}"


@dataclass(frozen=True)
class OffsetRange:
    """Messages [start, end) of one queue: what one Spark task reads."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> QueueKey:
        return (self.topic, self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    def to_dict(self) -> dict:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id,
                "start": self.start, "end": self.end}


def ranges_between(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int]) -> list[OffsetRange]:
    """Non-empty ranges for every queue of ``end`` (sorted by queue)."""
    ranges = []
    for key in sorted(end):
        s = start.get(key, 0)
        if end[key] > s:
            ranges.append(OffsetRange(*key, s, end[key]))
    return ranges


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One partition per queue range; with ``min_partitions`` above that count, large ranges
    are cut in proportion to their size (the Kafka source's KafkaOffsetRangeCalculator)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = min(r.size, max(1, round(r.size / total * min_partitions)))
        step = r.size / parts
        bounds = [r.start + math.floor(i * step) for i in range(parts)] + [r.end]
        out += [OffsetRange(r.topic, r.broker_name, r.queue_id, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return out


def rate_limit(start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_rows: int | None) -> Offsets:
    """End offsets for one micro-batch: everything up to ``latest``, or at most ``max_rows``
    messages spread over the queues in proportion to their backlog (as the Kafka source does),
    each queue getting at least one message while it has any, so no queue starves."""
    end = dict(latest)
    if max_rows is None:
        return end
    backlog = {k: latest[k] - start.get(k, 0) for k in latest if latest[k] > start.get(k, 0)}
    total = sum(backlog.values())
    if total <= max_rows:
        return end
    for key, size in backlog.items():
        share = max(1, math.floor(size / total * max_rows))
        end[key] = start.get(key, 0) + min(size, share)
    return end


def run_id(ranges: Iterable[OffsetRange]) -> str:
    """A short, stable name for a set of ranges: the same ranges always give the same id,
    so a re-run of a failed drain writes to the same place. It starts with a letter so that
    Spark's partition discovery (``run=<id>`` directories) always reads it as a string."""
    canonical = json.dumps(sorted([r.topic, r.broker_name, r.queue_id, r.start, r.end] for r in ranges),
                           separators=(",", ":"))
    return "r" + hashlib.sha256(canonical.encode()).hexdigest()[:15]
