"""ProcessQueue: what may be committed, and what flow control measures."""

from __future__ import annotations

import asyncio

from ferrymq.client.process_queue import ProcessQueue
from ferrymq.common.message import MessageExt


def msgs(*offsets: int, size: int = 10) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x" * size, queue_offset=o) for o in offsets]


def test_concurrent_commit_offset_never_passes_an_unfinished_message():
    pq = ProcessQueue()
    batch = msgs(10, 11, 12, 13)
    assert pq.put(batch) is True and pq.msg_count == 4 and pq.msg_size == 40
    assert pq.max_span() == 3
    assert pq.remove([batch[1], batch[2]]) == 10, "10 is still in flight"
    assert pq.remove([batch[3]]) == 10
    assert pq.remove([batch[0]]) == 14, "all done: the offset after the last pulled"
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.max_span() == 0
    assert pq.remove(batch) == -1, "nothing held: nothing to commit"


def test_duplicates_are_not_counted_twice():
    pq = ProcessQueue()
    pq.put(msgs(1, 2))
    pq.put(msgs(2, 3))
    assert pq.msg_count == 3


def test_orderly_take_commit_and_consume_again_keep_order():
    pq = ProcessQueue()
    pq.put(msgs(5, 6, 7, 8))
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [5, 6]
    pq.make_consume_again(first)
    again = pq.take(3)
    assert [m.queue_offset for m in again] == [5, 6, 7], "failed messages come back first, in order"
    assert pq.msg_count == 4, "taken messages still count for flow control"
    assert pq.commit() == 8
    assert pq.msg_count == 1
    assert [m.queue_offset for m in pq.take(5)] == [8]
    assert pq.commit() == 9
    assert pq.take(1) == [] and pq.consuming is False, "empty: the next pull dispatches again"
    assert pq.put(msgs(9)) is True


async def test_a_full_queue_wakes_its_puller_as_soon_as_messages_leave():
    pq = ProcessQueue()
    pq.put(msgs(1, 2, 3))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pq.wait_for_room(0.05)  # nothing consumed: waits out the bound
    assert loop.time() - started >= 0.04
    waiter = asyncio.create_task(pq.wait_for_room(30))
    await asyncio.sleep(0)
    pq.remove(msgs(1))
    await asyncio.wait_for(waiter, 5)  # woken by the consumption, not the 30 s bound
    waiter = asyncio.create_task(pq.wait_for_room(30))
    await asyncio.sleep(0)
    pq.dropped = True
    await asyncio.wait_for(waiter, 5)  # a dropped queue's pull loop ends at once
