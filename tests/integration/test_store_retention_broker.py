"""Retention in a running broker: its clean task deletes expired CommitLog files, queue minimums
follow, and a pull below the minimum answers PULL_OFFSET_MOVED (21) with the new start."""

from __future__ import annotations

import os

import pytest

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.wait import wait_until
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


async def test_expired_files_go_and_pulls_below_the_new_start_are_moved(tmp_path):
    c = await InProcessCluster(tmp_path / "store", settings={
        "mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 2000, "maxHashSlotNum": 64, "maxIndexNum": 100,
        "fileReservedTime": 0, "deleteWhen": EVERY_HOUR, "cleanResourceInterval": 50}).start()
    try:
        store = c.broker.store
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            first = await producer.send(Message("Aging", b"first " * 100))
            mq = first.message_queue
            results = [await producer.send(Message("Aging", b"body %d " % i * 100), queue=mq) for i in range(300)]
        # The broker's own clean task (every 50 ms) deletes every file but the one being written.
        await wait_until(lambda: store.commit_log_segments == 1)
        assert store.min_phy_offset > 0
        index_dir = tmp_path / "store" / "index"
        await wait_until(lambda: all(end >= store.min_phy_offset for end in store.index_file_ends()))
        assert len(os.listdir(index_dir)) == len(store.index_file_ends())

        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            new_min = await consumer.min_offset(mq)
            assert new_min > 0
            moved = await consumer.pull(mq, 0)
            assert moved.status is PullStatus.OFFSET_ILLEGAL  # code 21, PULL_OFFSET_MOVED
            assert (moved.next_begin_offset, moved.min_offset) == (new_min, new_min)
            resumed = await consumer.pull(mq, moved.next_begin_offset, max_nums=1)
            assert resumed.status is PullStatus.FOUND
            expected = next(r for r in results if r.queue_offset == new_min)
            assert resumed.messages[0].msg_id == expected.offset_msg_id

        client = RemotingClient()
        try:
            raw = await client.invoke(c.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "g", "topic": "Aging", "queueId": mq.queue_id, "queueOffset": 1, "maxMsgNums": 32,
                "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))
            assert raw.code == ResponseCode.PULL_OFFSET_MOVED and raw.remark == "OFFSET_TOO_SMALL"
            assert raw.get_long("nextBeginOffset") == new_min
        finally:
            await client.close()
    finally:
        await c.stop()
