"""A SYNC_MASTER put's replication wait (HAMaster.held_up_to) times out FLUSH_SLAVE_TIMEOUT after
syncFlushTimeout unless the members acknowledge first: each wait by its own deadline, a timeout
lowered live included, and stopping the master settles every wait. Controller mode with a member
that never connects keeps the waits open; the store is a real one."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

from ferrymq.broker.ha.master import HAMaster, HAMasterSettings
from ferrymq.common.message import MessageExt
from ferrymq.store import MessageStore, PutStatus, StoreConfig
from ferrymq.store.asyncio_store import AsyncMessageStore

STORE_HOST = ("127.0.0.1", 10911)


async def master_waiting_for_member_1(tmp_path, timeout_ms: list[int]) -> tuple[HAMaster, AsyncMessageStore]:
    store = AsyncMessageStore(MessageStore(StoreConfig(str(tmp_path)), store_host=STORE_HOST))
    await store.load(STORE_HOST)
    settings = HAMasterSettings(host="127.0.0.1", port=0, transfer_batch_size=32 * 1024, heartbeat_interval_ms=5000,
                                housekeeping_interval_ms=20_000, slave_fallbehind_max=256 * 1024 * 1024,
                                commit_log_file_size=1024 * 1024 * 1024)
    master = HAMaster(store, settings, lambda: timeout_ms[0])
    master.track_in_sync(epoch=1, members=frozenset({1}), in_sync_epoch=1)
    return master, store


async def put(store: AsyncMessageStore) -> int:
    result = await store.put_message(MessageExt("Waits", b"x", born_host=("10.0.0.1", 1)))
    assert result.status is PutStatus.PUT_OK
    return result.wrote_offset + result.wrote_bytes


async def test_each_wait_times_out_by_its_own_deadline_even_after_the_timeout_is_lowered(tmp_path):
    timeout_ms = [600]
    master, store = await master_waiting_for_member_1(tmp_path, timeout_ms)
    try:
        started = time.monotonic()
        first = master.held_up_to(await put(store))
        timeout_ms[0] = 100  # lowered live: a later wait times out before the earlier one
        second = master.held_up_to(await put(store))
        assert await second == PutStatus.FLUSH_SLAVE_TIMEOUT
        assert not first.done()  # the later wait's shorter deadline came first
        assert time.monotonic() - started >= 0.1
        assert await first == PutStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 0.55
    finally:
        await master.stop()
        await store.shutdown()


async def test_a_wait_answered_before_its_timeout_stays_answered_and_later_waits_still_time_out(tmp_path):
    timeout_ms = [300]
    master, store = await master_waiting_for_member_1(tmp_path, timeout_ms)
    try:
        answered = master.held_up_to(await put(store))
        master.set_in_sync(frozenset(), 2)  # the controller leaves the master alone in the set: waits answered
        assert await answered == PutStatus.PUT_OK
        master.set_in_sync(frozenset({1}), 3)  # the member is back in the set, still not connected
        started = time.monotonic()
        late = master.held_up_to(await put(store))
        assert await asyncio.wait_for(late, 2) == PutStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 0.25
        await asyncio.sleep(0.35)  # the first wait's deadline passes too: its answer does not change
        assert answered.result() == PutStatus.PUT_OK
    finally:
        await master.stop()
        await store.shutdown()


async def test_stopping_the_master_settles_every_wait(tmp_path):
    master, store = await master_waiting_for_member_1(tmp_path, [60_000])
    try:
        waits = [master.held_up_to(await put(store)) for _ in range(3)]
        await master.stop()
        assert [w.result() for w in waits] == [PutStatus.FLUSH_SLAVE_TIMEOUT] * 3
    finally:
        await store.shutdown()


async def test_answered_waits_are_let_go_long_before_their_deadlines(tmp_path):
    """Under load thousands of waits are answered each second, long before their deadlines: the
    master must not hold on to them (nor their answers) until then."""
    master, store = await master_waiting_for_member_1(tmp_path, [60_000])
    try:
        answered = []
        for _ in range(20):
            wait = master.held_up_to(await put(store))
            master.set_in_sync(frozenset(), 2)
            assert await wait == PutStatus.PUT_OK
            answered.append(weakref.ref(wait))
            del wait
            master.set_in_sync(frozenset({1}), 3)
        still_open = master.held_up_to(await put(store))
        await asyncio.sleep(0)  # the answers' callbacks have run
        gc.collect()
        assert [ref() for ref in answered] == [None] * 20
        assert not still_open.done()
    finally:
        await master.stop()
        await store.shutdown()
