"""Finding messages: by key and by id through the brokers' index, and by topic and time
range by reading the topic's queues between the offsets the brokers' time search gives.

A time-range search is bounded (both ends required) and read a page at a time: queues in
route order, each from the first offset at or after ``begin`` up to the last at or before
``end``. A page's cursor says where the next page starts (queue index and offset)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ferrymq.client.pull_consumer import PullStatus
from ferrymq.common.message import MessageExt
from ferrymq.common.protocol import MessageQueue
from ferrymq.console.connections import ClusterConnection
from ferrymq.console.http_errors import BadRequest

PULL_BATCH = 32
PARALLEL_SEARCHES = 8  # time searches in flight at once, per request
MAX_KEY_RESULTS = 2048  # per broker, the brokers' index query answers at most this many


@dataclass(frozen=True)
class Cursor:
    queue_index: int = 0
    offset: int | None = None  # None: the queue's first offset in the range

    def encode(self) -> str:
        raw = json.dumps({"q": self.queue_index, "o": self.offset}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @staticmethod
    def decode(text: str | None) -> "Cursor":
        if not text:
            return Cursor()
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            cursor = Cursor(int(data["q"]), None if data["o"] is None else int(data["o"]))
        except (ValueError, KeyError, TypeError):
            raise BadRequest("cursor is not one this console gave out") from None
        if cursor.queue_index < 0 or (cursor.offset is not None and cursor.offset < 0):
            raise BadRequest("cursor is not one this console gave out")
        return cursor


@dataclass
class QueueRange:
    mq: MessageQueue
    first: int  # offset where reading starts
    end: int  # offset where it stops (exclusive)


@dataclass
class RangePage:
    messages: list[MessageExt]
    next_cursor: Cursor | None
    estimated_total: int  # messages stored in the range's offsets, before the exact time filter


def check_range(begin_ms: int, end_ms: int) -> None:
    if end_ms < begin_ms:
        raise BadRequest("end is before begin")


async def by_key(connection: ClusterConnection, topic: str, key: str, begin_ms: int = 0,
                 end_ms: int | None = None) -> list[MessageExt]:
    return await connection.admin.query_messages(topic, key, max_num=MAX_KEY_RESULTS, begin_ms=begin_ms, end_ms=end_ms)


async def by_id(connection: ClusterConnection, msg_id: str, topic: str | None) -> MessageExt:
    return await connection.admin.find_message(msg_id, topic)


async def queue_ranges(connection: ClusterConnection, topic: str, begin_ms: int, end_ms: int) -> list[QueueRange]:
    """Each queue's offsets that can hold messages stored within [begin, end]. The brokers'
    time search answers the nearest message, which may lie just outside: the range takes it
    in, and the exact filter on store time drops it."""
    pull = await connection.pull_consumer()
    limit = asyncio.Semaphore(PARALLEL_SEARCHES)

    async def range_of(q: dict) -> QueueRange | None:
        low, high = q["minOffset"], q["maxOffset"]
        if high <= low:
            return None
        mq = MessageQueue(topic, q["brokerName"], q["queueId"])
        async with limit:
            first = max(low, await pull.search_offset(mq, begin_ms))
            end = min(high, await pull.search_offset(mq, end_ms) + 1)
        return QueueRange(mq, first, end) if end > first else None

    found = await asyncio.gather(*(range_of(q) for q in await connection.admin.topic_stats(topic)))
    return sorted((r for r in found if r is not None), key=lambda r: r.mq)


async def by_time(connection: ClusterConnection, topic: str, begin_ms: int, end_ms: int, *, limit: int,
                  cursor: Cursor = Cursor()) -> RangePage:
    check_range(begin_ms, end_ms)
    ranges = await queue_ranges(connection, topic, begin_ms, end_ms)
    pull = await connection.pull_consumer()
    found: list[MessageExt] = []
    index, offset = cursor.queue_index, cursor.offset
    while index < len(ranges) and len(found) < limit:
        qr = ranges[index]
        offset = qr.first if offset is None else max(offset, qr.first)
        while offset < qr.end and len(found) < limit:
            result = await pull.pull(qr.mq, offset, max_nums=min(PULL_BATCH, qr.end - offset))
            if result.status is PullStatus.OFFSET_ILLEGAL and result.next_begin_offset > offset:
                offset = result.next_begin_offset  # the start was deleted by retention meanwhile
                continue
            if not result.messages:
                break
            for m in result.messages:
                if m.queue_offset >= qr.end:
                    break
                offset = m.queue_offset + 1
                if begin_ms <= m.store_timestamp <= end_ms:
                    found.append(m)
                    if len(found) >= limit:
                        break
        if offset is not None and offset < qr.end and len(found) >= limit:
            break  # this page is full; the next one goes on in this queue
        index, offset = index + 1, None
    more = index < len(ranges)
    return RangePage(found, Cursor(index, offset) if more else None,
                     sum(r.end - r.first for r in ranges))


async def every_in_range(connection: ClusterConnection, topic: str, begin_ms: int, end_ms: int,
                         page_size: int = 256) -> AsyncIterator[MessageExt]:
    cursor: Cursor | None = Cursor()
    while cursor is not None:
        page = await by_time(connection, topic, begin_ms, end_ms, limit=page_size, cursor=cursor)
        for m in page.messages:
            yield m
        cursor = page.next_cursor
