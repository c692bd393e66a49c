"""A put made on the broker's loop is answered before its ConsumeQueue entries and index keys
are written (RocketMQ's ReputMessageService): they are written right behind it, before the loop
reads anything else, so whatever a client does after reading the answer finds the message, and
a held pull is woken only once the message can be read. A dispatch that fails (a full disk)
keeps what was acknowledged and makes it consumable once the disk has room again."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.common.message import MessageExt, decode_records
from ferrymq.store import MessageStore, PutStatus, StoreConfig
from ferrymq.store import asyncio_store as asyncio_store_module
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.consume_queue import ConsumeQueue

STORE_HOST = ("127.0.0.1", 10911)


def message(body: bytes, key: str = "", queue_id: int = 0) -> MessageExt:
    props = {"KEYS": key} if key else {}
    return MessageExt("Reput", body, properties=props, queue_id=queue_id,
                      born_timestamp=1_700_000_000_000, born_host=("192.168.1.10", 50000))


async def open_stores(path, **config) -> tuple[MessageStore, AsyncMessageStore]:
    """The store (what a test looks at underneath) and its asyncio face (what the broker uses)."""
    inner = MessageStore(StoreConfig(str(path), **config), store_host=STORE_HOST)
    store = AsyncMessageStore(inner)
    await store.load(STORE_HOST)
    assert (await store.put_message(message(b"first"))).status is PutStatus.PUT_OK  # queue 0 made (writer thread)
    await asyncio.sleep(0)
    return inner, store


async def open_store(path, **config) -> AsyncMessageStore:
    return (await open_stores(path, **config))[1]


async def bodies(store: AsyncMessageStore, queue_id: int = 0) -> list[bytes]:
    result = await store.get_messages("g", "Reput", queue_id, 0, 64)
    return [m.body for m in decode_records(b"".join(result.records))]


async def test_the_answer_comes_first_and_the_message_is_consumable_before_the_loop_reads_again(tmp_path):
    store = await open_store(tmp_path / "store")
    try:
        result = await store.put_message(message(b"second", key="k2"))
        assert result.status is PutStatus.PUT_OK and result.queue_offset == 1
        assert store.max_offset("Reput", 0) == 1, "the entry is written after the answer, not before"
        await asyncio.sleep(0)  # one pass of the loop: what a client's next request waits for at least
        assert store.max_offset("Reput", 0) == 2
        assert await bodies(store) == [b"first", b"second"]
        found = await store.query_message("Reput", "k2", 10, 0, 2**62)
        assert [m.body for m in decode_records(b"".join(found.records))] == [b"second"]
    finally:
        await store.shutdown()


async def test_a_held_pull_is_woken_only_once_the_message_can_be_read(tmp_path):
    inner, store = await open_stores(tmp_path / "store")
    seen: list[tuple[int, list[bytes]]] = []

    def on_arrival(topic: str, queue_id: int, max_offset: int, msgs) -> None:
        # What a woken pull does at once: read from the announced offset range.
        got = inner.get_messages("g", topic, queue_id, max_offset - len(msgs), 32)
        seen.append((max_offset, [m.body for m in decode_records(b"".join(got.records))]))

    store.arrival_listeners.append(on_arrival)
    try:
        await store.put_message(message(b"one"))
        await store.put_messages([message(b"two"), message(b"three")])
        await asyncio.sleep(0)
        assert seen == [(2, [b"one", b"two", b"three"]), (4, [b"two", b"three"])]
    finally:
        await store.shutdown()


async def test_a_topic_listener_hears_only_its_topic_and_write_listeners_the_new_end(tmp_path):
    """The delay and timer services listen to their own system topics only: a send elsewhere
    does not call them. Replication's write listeners hear where the CommitLog now ends."""
    _, store = await open_stores(tmp_path / "store")
    everything: list[str] = []
    scheduled: list[tuple[str, int]] = []
    ends: list[int] = []
    store.arrival_listeners.append(lambda topic, queue_id, max_offset, msgs: everything.append(topic))
    store.add_topic_arrival_listener("SCHEDULE_TOPIC_XXXX",
                                     lambda topic, queue_id, max_offset, msgs: scheduled.append((topic, max_offset)))
    store.write_listeners.append(ends.append)
    try:
        await store.put_message(message(b"plain"))
        delayed = message(b"delayed")
        delayed.topic = "SCHEDULE_TOPIC_XXXX"
        await store.put_message(delayed)  # its queue is new: written by the writer thread
        last = await store.put_message(message(b"plain again"))
        await asyncio.sleep(0)
        assert everything == ["Reput", "SCHEDULE_TOPIC_XXXX", "Reput"]
        assert scheduled == [("SCHEDULE_TOPIC_XXXX", 1)]
        assert ends[-1] == last.wrote_offset + last.wrote_bytes == store.max_phy_offset
        assert ends == sorted(ends) and len(ends) == 3
    finally:
        await store.shutdown()


async def test_a_put_in_the_writer_thread_writes_the_entries_deferred_before_it_first(tmp_path):
    inner, store = await open_stores(tmp_path / "store")
    try:
        # A put made on the loop whose dispatch has not run yet when the writer thread puts the next.
        on_loop = inner.put_group([message(b"on the loop")], defer_dispatch=True)[0]
        store._offloaded_until = float("inf")  # a slow append sent the next ones to the writer thread
        in_thread = await store.put_message(message(b"in the thread"))
        assert (on_loop.queue_offset, in_thread.queue_offset) == (1, 2)
        assert inner.dispatch_backlog == 0
        assert await bodies(store) == [b"first", b"on the loop", b"in the thread"]
    finally:
        store._offloaded_until = 0.0
        await store.shutdown()


async def test_a_failed_dispatch_keeps_what_was_acknowledged_and_delivers_it_once_the_disk_has_room(
        tmp_path, monkeypatch):
    monkeypatch.setattr(asyncio_store_module, "DISPATCH_RETRY_SECONDS", 0.05)
    store = await open_store(tmp_path / "store")
    arrivals: list[int] = []
    store.arrival_listeners.append(lambda topic, queue_id, max_offset, msgs: arrivals.append(max_offset))
    real_append = ConsumeQueue.append
    disk_full = True

    def append(self, *args):
        if disk_full:
            raise OSError(28, "No space left on device")
        return real_append(self, *args)

    monkeypatch.setattr(ConsumeQueue, "append", append)
    try:
        acked = await store.put_message(message(b"acknowledged"))
        assert acked.status is PutStatus.PUT_OK and acked.queue_offset == 1  # in the CommitLog: answered
        await asyncio.sleep(0.01)
        assert store.max_offset("Reput", 0) == 1 and arrivals == []  # not consumable, no pull woken
        refused = await store.put_message(message(b"refused"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and "disk is full" in refused.remark
        await asyncio.sleep(0.12)  # retried meanwhile, still failing: nothing lost, nothing announced
        assert store.max_offset("Reput", 0) == 1 and arrivals == []

        disk_full = False
        await store.clean()  # the retention run finds room: puts are taken again
        for _ in range(100):
            if store.max_offset("Reput", 0) == 2:
                break
            await asyncio.sleep(0.02)
        assert arrivals == [2]
        later = await store.put_message(message(b"later"))
        assert later.status is PutStatus.PUT_OK and later.queue_offset == 2
        await asyncio.sleep(0)
        assert await bodies(store) == [b"first", b"acknowledged", b"later"]
    finally:
        await store.shutdown()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_a_shutdown_right_after_a_put_keeps_its_entries(tmp_path, flush):
    inner, store = await open_stores(tmp_path / "store", flush_disk_type=flush)
    last = inner.put_group([message(b"not yet dispatched", key="kx")], defer_dispatch=True)[0]
    assert last.status is PutStatus.PUT_OK and inner.dispatch_backlog == 1
    await store.shutdown()
    inner_again, again = await open_stores(tmp_path / "store", flush_disk_type=flush)
    try:
        assert (await bodies(again))[:2] == [b"first", b"not yet dispatched"]
        assert inner_again.last_exit_clean
        assert inner_again.last_recovery.records_checked == 0  # written at shutdown, nothing left to redo
    finally:
        await again.shutdown()
