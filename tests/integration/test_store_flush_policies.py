"""Flush policies through a real broker: SYNC_FLUSH group commit, FLUSH_DISK_TIMEOUT (10) with a
complete response header, WAIT=false answered without waiting, ASYNC_FLUSH's timer."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message, decode_records
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.wait import wait_until
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration


async def start_cluster(tmp_path, **settings) -> InProcessCluster:
    return await InProcessCluster(tmp_path / "store", settings={"maxHashSlotNum": 1000, "maxIndexNum": 4000,
                                                               **settings}).start()


def send_request(topic: str, queue_id: int, body: bytes, properties: str = "") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "p", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000), "h": 0,
        "i": properties or None, "j": 0, "k": False, "m": False}, body)


async def test_concurrent_sync_sends_share_fsyncs(tmp_path):
    # 128 sends at once meet admission control's 200 ms (waitTimeMillsInSendQueue) on a slow or
    # busy machine (a cold CI run got SYSTEM_BUSY after 205 ms in the writer's queue): this test
    # is about fsyncs shared, not about shedding load (tests/broker/test_flow_control.py is).
    c = await start_cluster(tmp_path, flushDiskType="SYNC_FLUSH", waitTimeMillsInSendQueue=60_000)
    try:
        store = c.broker.store
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            await producer.send(Message("GroupCommit", b"warm-up"))  # topic created, route known
            before = store.group_commit_stats.acks, store.group_commit_stats.fsyncs

            async def one_producer(n: int) -> list:
                return [await producer.send(Message("GroupCommit", b"%d-%d" % (n, i))) for i in range(5)]

            results = [r for rs in await asyncio.gather(*(one_producer(n) for n in range(128))) for r in rs]
        assert len(results) == 640 and all(r.status is SendStatus.SEND_OK for r in results)
        acks = store.group_commit_stats.acks - before[0]
        fsyncs = store.group_commit_stats.fsyncs - before[1]
        assert acks == 640
        assert fsyncs < acks  # 128 senders at once: many acknowledgements per fsync
        print(f"128 concurrent producers: {acks} acknowledgements, {fsyncs} fsyncs ({acks / fsyncs:.1f} per fsync)")
        # Every acknowledged byte is on disk.
        assert store.flushed_phy_offset >= max(decode_offset_msg_id(r.offset_msg_id)[2] for r in results)
    finally:
        await c.stop()


async def test_flush_disk_timeout_answers_10_with_a_complete_header_and_keeps_the_message(tmp_path):
    c = await start_cluster(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=0)
    client = RemotingClient()
    try:
        response = await client.invoke(c.broker_addr, send_request("Slow", 1, b"stored anyway"), 5)
        assert response.code == ResponseCode.FLUSH_DISK_TIMEOUT
        # The Java client decodes the header of a 10 like a success: every field must be there.
        for key in ("msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"):
            assert response.get_str(key), key
        assert response.get_int("queueId") == 1 and response.get_long("queueOffset") == 0
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            result = await producer.send(Message("Slow", b"python client"), queue=MessageQueue("Slow", "broker-a", 1))
        assert result.status is SendStatus.FLUSH_DISK_TIMEOUT and result.queue_offset == 1
        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            pulled = await consumer.pull(MessageQueue("Slow", "broker-a", 1), 0)
        assert pulled.status is PullStatus.FOUND
        assert [m.body for m in pulled.messages] == [b"stored anyway", b"python client"]
    finally:
        await client.close()
        await c.stop()


async def test_wait_false_is_answered_without_waiting_for_the_disk(tmp_path):
    # syncFlushTimeout 0: any send that waited for its fsync would be answered 10.
    c = await start_cluster(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=0)
    client = RemotingClient()
    try:
        response = await client.invoke(c.broker_addr, send_request("NoWait", 0, b"x", "WAIT\x01false"), 5)
        assert response.code == ResponseCode.SUCCESS
        store = c.broker.store
        end = store.max_phy_offset
        await wait_until(lambda: store.flushed_phy_offset >= end)  # and it was flushed soon after
        record = await store.look_message(decode_offset_msg_id(response.get_str("msgId"))[2])
        assert "WAIT" not in decode_records(record)[0].properties  # honoured, not stored (as 4.9.1+)
        waited = await client.invoke(c.broker_addr, send_request("NoWait", 0, b"y"), 5)
        assert waited.code == ResponseCode.FLUSH_DISK_TIMEOUT
    finally:
        await client.close()
        await c.stop()


async def test_async_flush_timer_flushes_without_anyone_asking(tmp_path):
    c = await start_cluster(tmp_path, flushDiskType="ASYNC_FLUSH", flushIntervalCommitLog=20,
                            flushCommitLogLeastPages=4, flushCommitLogThoroughInterval=200)
    try:
        store = c.broker.store
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            result = await producer.send(Message("Timed", b"small"))
            assert result.status is SendStatus.SEND_OK
        end = store.max_phy_offset
        # One page dirty (< 4): only the thorough flush, at most 200 ms later, takes it.
        await wait_until(lambda: store.flushed_phy_offset >= end)
    finally:
        await c.stop()
