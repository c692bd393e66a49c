"""A full disk, for real: the broker's store lives on a small tmpfs (or, where tmpfs cannot be
mounted, an ext4 loop file). Sends that hit ENOSPC, or come while the disk is above the
guard (diskSpaceWarningLevelRatio), are refused with SERVICE_NOT_AVAILABLE (14) and RocketMQ's
"disk is full" remark; nothing acknowledged is damaged, recovery after kill -9 on the full
disk works, and sends are accepted again once space is freed."""

from __future__ import annotations

import asyncio
import os

import pytest
from store_checks import Acked, assert_acked_present, pull_queue

from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.codes import ResponseCode
from tests.store.small_fs import SmallFsUnavailable, fill_to, small_filesystem
from testkit.wait import wait_until
from tests.support import InProcessCluster, missing_prerequisite

pytestmark = pytest.mark.integration

SETTINGS = ["mappedFileSizeCommitLog=1048576", "mappedFileSizeConsumeQueue=4000", "maxHashSlotNum=64", "maxIndexNum=2000",
            "cleanResourceInterval=100", "cleanFileForciblyEnable=false", "flushDiskType=SYNC_FLUSH"]


@pytest.fixture
def small_fs(tmp_path):
    try:
        with small_filesystem(tmp_path, 8) as (path, kind):
            print(f"disk-full test on a {kind}")
            yield path
    except SmallFsUnavailable as e:
        missing_prerequisite(f"no small file system for the disk-full test: {e}")


async def pull_all(namesrv_addr: str, queues: int) -> dict:
    async with PullConsumer("disk-check", namesrv_addr=namesrv_addr) as consumer:
        return {q: await pull_queue(consumer, MessageQueue("Full", "broker-a", q)) for q in range(queues)}


async def test_enospc_refuses_sends_keeps_everything_acknowledged_and_recovers(standalone_process, small_fs):
    filler = fill_to(small_fs, 0.4)
    # The store is the whole small file system (its log file goes next to it, off it).
    # diskSpaceWarningLevelRatio=100: the guard never trips first, the writes really hit ENOSPC.
    proc = await asyncio.to_thread(standalone_process, small_fs, [*SETTINGS, "diskSpaceWarningLevelRatio=100"])
    acked: list[Acked] = []
    refusal = None
    async with Producer("p", namesrv_addr=proc.namesrv_addr, retry_times=0) as producer:
        for i in range(5000):
            mq = MessageQueue("Full", "broker-a", i % 2)
            body = b"%06d" % i + os.urandom(4000)
            try:
                r = await producer.send(Message("Full", body), queue=mq)
            except MQBrokerError as e:
                refusal = e
                break
            assert r.status is SendStatus.SEND_OK
            acked.append(Acked(mq.queue_id, r.queue_offset, body, r.offset_msg_id))
        assert refusal is not None, "the disk never filled up"
        assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "the broker's disk is full [CL:" in str(refusal) and "No space left on device" in str(refusal)
        with pytest.raises(MQBrokerError) as again:  # the store stays marked full: no write is even tried
            await producer.send(Message("Full", b"more"), queue=MessageQueue("Full", "broker-a", 0))
        assert again.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    print(f"{len(acked)} messages acknowledged before the disk filled")
    assert len(acked) > 100
    assert_acked_present(await pull_all(proc.namesrv_addr, 2), acked)

    # kill -9 on the full disk, and recover there.
    proc.kill()
    await asyncio.to_thread(proc.start)
    assert "not shut down cleanly" in proc.log()
    assert_acked_present(await pull_all(proc.namesrv_addr, 2), acked)

    filler.unlink()  # space again: the clean task (every 100 ms) lets sends in
    async with Producer("p", namesrv_addr=proc.namesrv_addr, retry_times=0) as producer:
        async def accepted():
            try:
                return await producer.send(Message("Full", b"after"), queue=MessageQueue("Full", "broker-a", 0))
            except MQBrokerError as e:
                assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE
                return None

        r = await wait_until(accepted, 20, "a send accepted once there is space again", interval=0.05)
    acked.append(Acked(0, r.queue_offset, b"after", r.offset_msg_id))
    assert_acked_present(await pull_all(proc.namesrv_addr, 2), acked)
    await asyncio.to_thread(proc.stop)


async def test_guard_ratio_refuses_sends_until_space_is_freed(small_fs):
    settings = dict(s.split("=") for s in SETTINGS) | {"diskSpaceWarningLevelRatio": "50"}
    c = await InProcessCluster(small_fs / "store", settings=settings).start()
    try:
        async with Producer("p", namesrv_addr=c.namesrv_addr, retry_times=0) as producer:
            ok = await producer.send(Message("Full", b"before"))
            filler = fill_to(small_fs, 0.7)  # over the 50 % guard
            await c.broker.store.clean()  # (the broker's own task runs this every 100 ms too)
            with pytest.raises(MQBrokerError) as refused:
                await producer.send(Message("Full", b"refused"), queue=ok.message_queue)
            assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "diskSpaceWarningLevelRatio 50%" in str(refused.value)
            store = c.broker.store
            assert store.max_offset("Full", ok.message_queue.queue_id) == ok.queue_offset + 1

            filler.unlink()
            await wait_until(lambda: store.writable, 20, "the store writable once there is space again")
            after = await producer.send(Message("Full", b"after"), queue=ok.message_queue)
            assert after.queue_offset == ok.queue_offset + 1
    finally:
        await c.stop()
