"""SYNC_FLUSH sends wait for their fsync on the broker's loop, each for at most syncFlushTimeout:
while the disk is too slow they are answered FLUSH_DISK_TIMEOUT (the message stored), and once
it is fast again sends are acknowledged as before."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ferrymq.common.message import MessageExt
from ferrymq.store import MessageStore, PutStatus, StoreConfig
from ferrymq.store import mapped_file
from ferrymq.store.asyncio_store import AsyncMessageStore


def message(i: int) -> MessageExt:
    return MessageExt("FlushWait", f"m{i}".encode(), properties={"KEYS": f"k{i}"}, queue_id=0,
                      born_timestamp=1_700_000_000_000, born_host=("192.168.1.10", 50000))


async def sync_flush_store(tmp_path, sync_flush_timeout_ms: int) -> tuple[MessageStore, AsyncMessageStore]:
    """A SYNC_FLUSH store on the running loop with queue 0 of FlushWait created (message 0)."""
    store = MessageStore(StoreConfig(str(tmp_path / "store"), flush_disk_type="SYNC_FLUSH",
                                     sync_flush_timeout=sync_flush_timeout_ms), store_host=("127.0.0.1", 10911))
    facade = AsyncMessageStore(store)
    await facade.load(("127.0.0.1", 10911))
    assert (await facade.put_message(message(0))).status is PutStatus.PUT_OK  # creates the queue
    return store, facade


@pytest.fixture
def slow_disk(monkeypatch):
    """fdatasync that takes 0.6 s more while the returned event is set (a stalled disk)."""
    slow = threading.Event()
    real = mapped_file.fdatasync

    def fdatasync(fd: int) -> None:
        if slow.is_set():
            time.sleep(0.6)
        real(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", fdatasync)
    return slow


async def test_sends_time_out_while_the_disk_stalls_and_are_acknowledged_again_after(tmp_path, slow_disk):
    store, facade = await sync_flush_store(tmp_path, 150)
    try:

        slow_disk.set()
        started = time.monotonic()
        stalled = await asyncio.gather(*(facade.put_message(message(i)) for i in range(1, 9)))
        waited = time.monotonic() - started
        assert [r.status for r in stalled] == [PutStatus.FLUSH_DISK_TIMEOUT] * 8
        assert all("syncFlushTimeout 150 ms" in r.remark for r in stalled)
        assert waited < 0.6, "answered at the timeout, not when the slow fsync ended"
        assert [r.queue_offset for r in stalled] == list(range(1, 9))  # stored all the same

        slow_disk.clear()
        await asyncio.sleep(0.7)  # the stalled fsync ends
        again = await asyncio.gather(*(facade.put_message(message(i)) for i in range(9, 17)))
        assert [r.status for r in again] == [PutStatus.PUT_OK] * 8
        assert store.commit_log.flushed_offset >= again[-1].wrote_offset + again[-1].wrote_bytes
        got = await facade.get_messages("g", "FlushWait", 0, 0, 32)
        assert got.message_count == 17
    finally:
        await facade.shutdown()


async def test_a_failed_fsync_fails_the_sends_it_was_for_and_the_next_fsync_answers_the_rest(tmp_path, monkeypatch):
    """Sends waiting together share one request to the group-commit thread; a failed fsync
    answers the ones it was asked for FLUSH_DISK_TIMEOUT, and sends that came during it are
    acknowledged by the next one. The statistics count sends, not requests."""
    real = mapped_file.fdatasync
    fsyncs: list[float] = []
    failing = threading.Event()

    def fdatasync(fd: int) -> None:
        fsyncs.append(time.monotonic())
        if failing.is_set():
            failing.clear()
            time.sleep(0.2)  # long enough for the sends below to queue behind this fsync
            raise OSError(5, "Input/output error")
        real(fd)

    store, facade = await sync_flush_store(tmp_path, 5000)
    try:
        stats = store.group_commit.stats
        acks_before = stats.acks
        monkeypatch.setattr(mapped_file, "fdatasync", fdatasync)
        failing.set()
        first = asyncio.ensure_future(facade.put_message(message(1)))  # asks for the fsync that fails
        await asyncio.sleep(0.05)
        later = [asyncio.ensure_future(facade.put_message(message(i))) for i in range(2, 12)]
        results = await asyncio.gather(first, *later)
        assert results[0].status is PutStatus.FLUSH_DISK_TIMEOUT
        assert results[0].remark == "the fsync of the CommitLog failed"
        assert [r.status for r in results[1:]] == [PutStatus.PUT_OK] * 10  # the next fsync covered them
        assert stats.acks - acks_before == 11
        assert store.commit_log.flushed_offset >= results[-1].wrote_offset + results[-1].wrote_bytes
        assert len(fsyncs) <= 4  # the ten that queued behind the failed fsync shared the next one
    finally:
        await facade.shutdown()
