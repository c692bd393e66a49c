"""What a master's HA link sends a slave keeping up. An ASYNC_MASTER's caught-up slave gets a
trickle of sends in one transfer per linger (haAsyncTransferLingerMills), not one per send:
every byte still arrives, in order, about a linger after the first send. Where someone waits for
the slave (SYNC_MASTER, controller mode's in-sync set) the master sends at once whatever the
setting. A put larger than haTransferBatchSize goes out as transfers of at most that size, back to
back, and a SYNC_MASTER answers it once the slave holds them all. A real store and the real HA
listener; the slave is a plain socket speaking the HA frames."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.broker.ha.frames import TRANSFER_BATCH_SIZE, TRANSFER_HEADER, decode_transfer_header, encode_offset_report
from ferrymq.broker.ha.master import HAMaster, HAMasterSettings
from ferrymq.common.message import MessageExt
from ferrymq.store import MessageStore, PutStatus, StoreConfig
from ferrymq.store.asyncio_store import AsyncMessageStore

STORE_HOST = ("127.0.0.1", 10911)
SENDS = 10


class RawSlave:
    """Reports offset 0, then reads transfers: (arrival time, offset, body size) for each with a body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.transfers: list[tuple[float, int, int]] = []
        self.received = 0

    @classmethod
    async def connect(cls, port: int) -> "RawSlave":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_offset_report(0))
        await writer.drain()
        return cls(reader, writer)

    async def read_until(self, end: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while self.received < end:
                header = decode_transfer_header(await self.reader.readexactly(TRANSFER_HEADER.size),
                                                TRANSFER_BATCH_SIZE)
                offset, size = header.offset, header.size
                if size:
                    await self.reader.readexactly(size)
                    assert offset == self.received, "transfers arrive in order, with no gap"
                    self.transfers.append((time.monotonic(), offset, size))
                    self.received += size
                    self.writer.write(encode_offset_report(self.received))

    def close(self) -> None:
        self.writer.close()


async def serving_master(tmp_path, linger_ms: int, *, push_on_write: bool = False,
                         transfer_batch_size: int = 32 * 1024) -> tuple[HAMaster, AsyncMessageStore]:
    store = AsyncMessageStore(MessageStore(StoreConfig(str(tmp_path)), store_host=STORE_HOST))
    await store.load(STORE_HOST)
    settings = HAMasterSettings(host="127.0.0.1", port=0, transfer_batch_size=transfer_batch_size,
                                heartbeat_interval_ms=5000, housekeeping_interval_ms=20_000,
                                slave_fallbehind_max=256 * 1024 * 1024, commit_log_file_size=1024 * 1024 * 1024,
                                async_linger_ms=linger_ms)
    master = HAMaster(store, settings, lambda: 3000, push_on_write=push_on_write)
    if push_on_write:  # SYNC_MASTER: puts wait for a slave (as broker/ha/replication.py sets it up)
        store.replication_wait = master.replication_wait
    await master.start()
    return master, store


async def trickle(store: AsyncMessageStore, sends: int = SENDS, gap_s: float = 0.002) -> tuple[float, int]:
    """``sends`` puts ``gap_s`` apart: when the first was stored, and the CommitLog's end after the last."""
    first_at = 0.0
    end = 0
    for i in range(sends):
        result = await store.put_message(MessageExt("Linger", b"m%d" % i, born_host=("10.0.0.1", 1)), wait=False)
        assert result.status is PutStatus.PUT_OK
        first_at = first_at or time.monotonic()
        end = result.wrote_offset + result.wrote_bytes
        await asyncio.sleep(gap_s)
    return first_at, end


async def caught_up_slave(master: HAMaster, store: AsyncMessageStore) -> RawSlave:
    """A slave connected and holding what the store has (one message, so it has started streaming)."""
    slave = await RawSlave.connect(master.port)
    _, end = await trickle(store, sends=1, gap_s=0)
    await slave.read_until(end)
    slave.transfers.clear()
    return slave


async def test_a_trickle_of_sends_reaches_a_caught_up_slave_in_a_transfer_per_linger(tmp_path):
    master, store = await serving_master(tmp_path, linger_ms=500)
    try:
        slave = await caught_up_slave(master, store)
        first_at, end = await trickle(store)  # ten sends in some 20 ms: well within one linger
        await slave.read_until(end)
        assert len(slave.transfers) == 1, slave.transfers
        arrived, _, size = slave.transfers[0]
        assert size == end - slave.transfers[0][1]  # every send's record, in the one transfer
        assert arrived - first_at >= 0.4  # it waited for the linger, not for the next send
        slave.close()
    finally:
        await master.stop()
        await store.shutdown()


async def test_without_a_linger_each_send_is_its_own_transfer(tmp_path):
    master, store = await serving_master(tmp_path, linger_ms=0)
    try:
        slave = await caught_up_slave(master, store)
        _, end = await trickle(store, gap_s=0.02)  # each send long after the one before
        await slave.read_until(end)
        assert len(slave.transfers) == SENDS
        slave.close()
    finally:
        await master.stop()
        await store.shutdown()


@pytest.mark.parametrize("waited_for", ["sync master", "controller in-sync set"])
async def test_where_someone_waits_for_the_slave_the_master_sends_at_once_whatever_the_linger(tmp_path, waited_for):
    master, store = await serving_master(tmp_path, linger_ms=1000, push_on_write=waited_for == "sync master")
    try:
        if waited_for != "sync master":  # the master alone in the set: puts are answered, reads wait for members
            master.track_in_sync(epoch=1, members=frozenset(), in_sync_epoch=1)
        slave = await caught_up_slave(master, store)
        _, end = await trickle(store, gap_s=0.02)
        await slave.read_until(end, timeout=0.9)  # long before one linger would have passed
        assert len(slave.transfers) == SENDS
        slave.close()
    finally:
        await master.stop()
        await store.shutdown()


async def test_a_sync_put_larger_than_a_transfer_reaches_the_slave_in_transfers_of_at_most_that_size(tmp_path):
    master, store = await serving_master(tmp_path, linger_ms=5, push_on_write=True, transfer_batch_size=4096)
    try:
        slave = await RawSlave.connect(master.port)
        # the queue's first put (written in the store's thread), not waiting for the slave
        first = await store.put_message(MessageExt("Big", b"first", born_host=("10.0.0.1", 1)), wait=False)
        assert first.status is PutStatus.PUT_OK
        await slave.read_until(store.max_phy_offset)
        slave.transfers.clear()
        start = store.max_phy_offset
        batch = [MessageExt("Big", bytes([i]) * 1024, born_host=("10.0.0.1", 1)) for i in range(20)]
        put = asyncio.create_task(store.put_messages(batch))
        async with asyncio.timeout(2):
            while store.max_phy_offset == start:  # written (and its transfers sent), now waiting
                await asyncio.sleep(0.001)
        end = store.max_phy_offset
        assert end - start > 5 * 4096
        await slave.read_until(end)
        result = await asyncio.wait_for(put, 2)
        assert result.status is PutStatus.PUT_OK and result.msg_num == 20
        sizes = [size for _, _, size in slave.transfers]
        assert all(size == 4096 for size in sizes[:-1]) and 0 < sizes[-1] <= 4096
        assert sum(sizes) == end - start
        slave.close()
    finally:
        await master.stop()
        await store.shutdown()
