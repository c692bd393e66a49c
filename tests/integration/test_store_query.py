"""Message queries through the broker: QUERY_MESSAGE (12) by key and by UNIQ_KEY,
VIEW_MESSAGE_BY_ID (33), SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32), and the
``ferrymq admin message query / view`` commands, after a clean restart and after kill -9."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message, decode_records
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.processes import REPO
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

SETTINGS = ["mappedFileSizeCommitLog=65536", "maxHashSlotNum=64", "maxIndexNum=200"]  # several IndexFiles


async def produce(namesrv_addr: str, topic: str, count: int, prefix: str = "order") -> list:
    async with Producer("query-p", namesrv_addr=namesrv_addr) as producer:
        results = []
        for i in range(count):
            m = Message(topic, b"%s body %d " % (prefix.encode(), i) * 20)
            m.keys = [f"{prefix}-{i}", f"customer-{i % 3}" if prefix == "order" else f"{prefix}-all"]
            m.tags = "TagA"
            results.append((m, await producer.send(m)))
        return results


async def test_query_view_search_and_earliest_time_over_the_wire(tmp_path):
    c = await InProcessCluster(tmp_path / "store", settings=dict(s.split("=") for s in SETTINGS)).start()
    try:
        before = int(time.time() * 1000)
        sent = await produce(c.namesrv_addr, "Orders", 60)
        async with AdminClient(namesrv_addr=c.namesrv_addr) as admin:
            by_key = await admin.query_messages("Orders", "order-42")
            assert [m.body for m in by_key] == [sent[42][0].body]
            assert by_key[0].msg_id == sent[42][1].offset_msg_id
            customers = await admin.query_messages("Orders", "customer-1")
            assert [m.body for m in customers] == [m.body for m, _ in sent if "customer-1" in m.keys]
            by_id = await admin.query_messages("Orders", sent[7][1].msg_id, unique_key=True)
            assert [m.client_msg_id for m in by_id] == [sent[7][1].msg_id]
            viewed = await admin.view_message(sent[13][1].offset_msg_id)
            assert viewed.body == sent[13][0].body and viewed.keys == ["order-13", "customer-1"]
            assert await admin.query_messages("Orders", "no-such-key") == []
            # A time range that excludes everything.
            assert await admin.query_messages("Orders", "order-42", end_ms=before - 60_000) == []

        client = RemotingClient()
        try:
            raw = await client.invoke(c.broker_addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
                "topic": "Orders", "key": "order-5", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**63 - 1}))
            assert raw.code == ResponseCode.SUCCESS
            assert int(raw.get_str("indexLastUpdatePhyoffset")) == c.broker.store.indexed_phy_offset
            assert int(raw.get_str("indexLastUpdateTimestamp")) > 0
            assert [m.body for m in decode_records(raw.body)][:1] == [sent[5][0].body]
            missing = await client.invoke(c.broker_addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
                "topic": "Orders", "key": "nothing", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**63 - 1}))
            assert missing.code == ResponseCode.QUERY_NOT_FOUND
            assert missing.remark == "can not find message, maybe time range not correct"
            bad_view = await client.invoke(c.broker_addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 3}))
            assert bad_view.code == ResponseCode.SYSTEM_ERROR
        finally:
            await client.close()

        mq = sent[20][1].message_queue
        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            in_queue = [(m, r) for m, r in sent if r.message_queue == mq]
            stamp = (await consumer.pull(mq, in_queue[2][1].queue_offset, max_nums=1)).messages[0].store_timestamp
            assert await consumer.search_offset(mq, stamp) in (in_queue[1][1].queue_offset, in_queue[2][1].queue_offset,
                                                               in_queue[3][1].queue_offset)
            assert await consumer.search_offset(mq, 0) == 0
            earliest = await c.broker.store.store_time(mq.topic, mq.queue_id, 0)
        client = RemotingClient()
        try:
            response = await client.invoke(c.broker_addr, RemotingCommand.request(
                RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": mq.topic, "queueId": mq.queue_id}))
            assert response.get_long("timestamp") == earliest >= before
        finally:
            await client.close()
    finally:
        await c.stop()


def cli(namesrv: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "message", *args, "-n", namesrv],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def check_cli(namesrv: str, sent: list, *, everything: bool = True) -> None:
    out = cli(namesrv, "query", "--key", "order-33", "--topic", "Orders", "--json")
    assert out.returncode == 0, out.stderr
    (found,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert found["body"] == sent[33][0].body.decode() and found["offsetMsgId"] == sent[33][1].offset_msg_id
    assert found["msgId"] == sent[33][1].msg_id and found["keys"] == "order-33 customer-0"
    view = cli(namesrv, "view", "--id", sent[50][1].offset_msg_id)
    assert view.returncode == 0, view.stderr
    assert sent[50][0].body.decode() in view.stdout and "order-50 customer-2" in view.stdout
    if not everything:
        return

    everywhere = cli(namesrv, "query", "--key", "customer-2")  # no --topic: every topic is searched
    assert everywhere.returncode == 0, everywhere.stderr
    assert everywhere.stdout.count("Orders") == sum(1 for m, _ in sent if "customer-2" in m.keys)

    by_uniq = cli(namesrv, "view", "--id", sent[51][1].msg_id, "--json")  # a client message id (UNIQ_KEY)
    assert json.loads(by_uniq.stdout)["body"] == sent[51][0].body.decode()

    nothing = cli(namesrv, "query", "--key", "nope", "--topic", "Orders")
    assert nothing.returncode == 1 and "no message with key 'nope'" in nothing.stdout
    bad = cli(namesrv, "view", "--id", "not-hex")
    assert bad.returncode == 1 and bad.stderr.startswith("error: no message with id not-hex")


async def test_cli_queries_after_a_clean_restart_and_after_kill_9(standalone_process, tmp_path):
    proc = await asyncio.to_thread(standalone_process, tmp_path / "store", SETTINGS)
    sent = await produce(proc.namesrv_addr, "Orders", 60)
    await asyncio.to_thread(check_cli, proc.namesrv_addr, sent)

    await asyncio.to_thread(proc.stop)
    await asyncio.to_thread(proc.start)
    assert "not shut down cleanly" not in proc.log()
    await asyncio.to_thread(functools.partial(check_cli, proc.namesrv_addr, sent, everything=False))

    more = await produce(proc.namesrv_addr, "Orders", 5, "late")  # the newest IndexFile has unflushed entries
    proc.kill()
    await asyncio.to_thread(proc.start)
    assert "not shut down cleanly" in proc.log()
    await asyncio.to_thread(functools.partial(check_cli, proc.namesrv_addr, sent, everything=False))
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        for m, r in more:
            (found,) = await admin.query_messages("Orders", r.msg_id, unique_key=True)
            assert found.body == m.body
            assert (await admin.view_message(r.offset_msg_id)).body == m.body
        with pytest.raises(MQBrokerError):
            await admin.view_message(r.offset_msg_id[:-4] + "FFFF")  # no record starts there


async def test_view_answers_for_every_queue_after_recovery(standalone_process, tmp_path):
    """VIEW by offset msgId works for messages in every queue and CommitLog file after kill -9."""
    proc = await asyncio.to_thread(standalone_process, tmp_path / "store", SETTINGS)
    sent = await produce(proc.namesrv_addr, "Orders", 120)  # > 1 CommitLog file of 64 KiB
    proc.kill()
    await asyncio.to_thread(proc.start)
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        for m, r in sent[::7]:
            viewed = await admin.view_message(r.offset_msg_id)
            assert (viewed.body, viewed.queue_id, viewed.queue_offset) == (m.body, r.message_queue.queue_id, r.queue_offset)
