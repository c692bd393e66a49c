"""POP over the remoting protocol (POP_MESSAGE 200050, ACK_MESSAGE 200051,
CHANGE_MESSAGE_INVISIBLETIME 200053) with FerryMQ's RemotingClient, and the exactly-once ack
bookkeeping across restarts of a broker subprocess: SIGTERM and kill -9. After either, no
acked message is delivered again and every unacked one is, once its invisible time is over.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from ferrymq.client.producer import Producer
from ferrymq.common.message import Message, decode_records
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import create_topic, produce
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

pytestmark = pytest.mark.integration


async def pop(client: RemotingClient, addr: str, group: str, topic: str, *, max_nums: int = 32,
              invisible_ms: int = 60_000, poll_ms: int = 0, **extra) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": max_nums,
              "invisibleTime": invisible_ms, "pollTime": poll_ms, "bornTime": int(time.time() * 1000),
              "initMode": 0, "expType": "TAG", "exp": "*", "order": False} | extra
    fields = {k: v for k, v in fields.items() if v is not None}
    return await client.invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, fields), poll_ms / 1000 + 5)


async def ack(client: RemotingClient, addr: str, group: str, topic: str, handle: str) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": 0, "offset": 0, "extraInfo": handle}))


async def pop_until(client, addr, group, topic, want: int, timeout: float = 30.0, **kw) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        r = await pop(client, addr, group, topic, poll_ms=2000, **kw)
        assert r.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), (r.code, r.remark)
        if r.code == ResponseCode.SUCCESS:
            got += decode_records(r.body)
    return got


async def test_pop_ack_and_change_over_remoting(cluster):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    await create_topic(ns, "RPop", 2)
    await produce(ns, "RPop", 3)
    client = RemotingClient()
    try:
        r = await pop(client, addr, "rg", "RPop", invisible_ms=800)
        assert r.code == ResponseCode.SUCCESS and int(r.ext_fields["invisibleTime"]) == 800
        msgs = decode_records(r.body)
        assert sorted(m.keys[0] for m in msgs) == ["k-0", "k-1", "k-2"]
        assert all(m.properties["POP_CK"] and m.reconsume_times == 0 for m in msgs)
        first, second, third = msgs
        assert (await ack(client, addr, "rg", "RPop", first.properties["POP_CK"])).code == ResponseCode.SUCCESS
        changed = await client.invoke(addr, RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": "rg", "topic": "RPop", "queueId": second.queue_id, "offset": second.queue_offset,
            "extraInfo": second.properties["POP_CK"], "invisibleTime": 60_000}))
        assert changed.code == ResponseCode.SUCCESS and changed.ext_fields["extraInfo"]
        # third's 800 ms end: it alone comes back, reconsume times raised
        again = await pop_until(client, addr, "rg", "RPop", 1)
        assert [(m.keys[0], m.reconsume_times) for m in again] == [(third.keys[0], 1)]
        stale = await ack(client, addr, "rg", "RPop", third.properties["POP_CK"])
        assert stale.code == ResponseCode.NO_MESSAGE and "out of date" in stale.remark
        old = await ack(client, addr, "rg", "RPop", second.properties["POP_CK"])
        assert old.code == ResponseCode.NO_MESSAGE, "the handle replaced by the change is out of date"
        assert (await ack(client, addr, "rg", "RPop", changed.ext_fields["extraInfo"])).code == ResponseCode.SUCCESS
        bad = await ack(client, addr, "rg", "RPop", "not-a-handle")
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL and "invalid receipt handle" in bad.remark

        nothing = await pop(client, addr, "rg", "RPop", poll_ms=300)
        assert nothing.code == ResponseCode.POLLING_TIMEOUT
        # refused, each with its reason
        r = await pop(client, addr, "rg", "RPop", invisible_ms=0)
        assert r.code == ResponseCode.INVALID_PARAMETER and "invisible time 0 ms out of range" in r.remark
        r = await pop(client, addr, "rg", "RPop", max_nums=100)
        assert r.code == ResponseCode.INVALID_PARAMETER and "max messages 100 out of range" in r.remark
        r = await pop(client, addr, "rg", "RPop", expType="XPATH")
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        r = await pop(client, addr, "rg", "RPop", initMode=7)
        assert r.code == ResponseCode.INVALID_PARAMETER and "initMode 7" in r.remark
        r = await pop(client, addr, "rg", "RPop", invisibleTime=None)
        assert r.code == ResponseCode.SYSTEM_ERROR and "invisibleTime" in r.remark
        r = await pop(client, addr, "rg", "NoSuchTopic")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        # RocketMQ 5's other POP codes are not served: refused, not dropped
        for code in (200052, 200149, 200150, 200151):  # PEEK_MESSAGE, NOTIFICATION, POLLING_INFO, BATCH_ACK_MESSAGE
            r = await client.invoke(addr, RemotingCommand.request(code, {"consumerGroup": "rg", "topic": "RPop"}))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, code
        # an ACK_MESSAGE without extraInfo names the missing field
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": "rg", "topic": "RPop", "queueId": 0, "offset": 0}))
        assert r.code == ResponseCode.SYSTEM_ERROR and "extraInfo" in r.remark
    finally:
        await client.close()


async def test_tag_filter_over_remoting(cluster):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    await create_topic(ns, "RPopTags", 1)
    await produce(ns, "RPopTags", 2, prefix="a", tags="TagA")
    await produce(ns, "RPopTags", 2, prefix="b", tags="TagB")
    client = RemotingClient()
    try:
        got = await pop_until(client, addr, "tag-g", "RPopTags", 2, exp="TagB")
        assert sorted(m.keys[0] for m in got) == ["b-0", "b-1"]
        r = await pop(client, addr, "tag-g", "RPopTags", exp="TagB", poll_ms=200)
        assert r.code == ResponseCode.POLLING_TIMEOUT
    finally:
        await client.close()


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
async def test_no_acked_message_redelivered_every_unacked_one_redelivered_across_restart(tmp_path, how):
    http = free_port()
    server = StandaloneProcess(tmp_path / "store", http_port=http).start()
    client = RemotingClient()
    try:
        ns, addr = server.namesrv_addr, server.broker_addr
        await create_topic(ns, "RPopCrash", 4)
        async with Producer("crash-producer", namesrv_addr=ns) as producer:
            for i in range(40):
                m = Message("RPopCrash", f"m-{i}".encode())
                m.keys = [f"m-{i}"]
                await producer.send(m)
        got = await pop_until(client, addr, "crash-g", "RPopCrash", 40, invisible_ms=4000)
        assert sorted(m.keys[0] for m in got) == sorted(f"m-{i}" for i in range(40))
        acked = set()
        for m in got[::3]:  # every ack answered SUCCESS is on disk
            assert (await ack(client, addr, "crash-g", "RPopCrash", m.properties["POP_CK"])).code == ResponseCode.SUCCESS
            acked.add(m.keys[0])
        unacked = {m.keys[0] for m in got} - acked
        metrics = (await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{http}/metrics", None, 10)).read()
        assert _metric(metrics.decode(), "ferrymq_broker_pop_acks_total") == len(acked)
        assert _metric(metrics.decode(), "ferrymq_broker_pop_in_flight_messages",
                       'group="crash-g",state="invisible"') == len(unacked)
        await client.close()
        if how == "kill-9":
            server.kill()
        else:
            assert server.stop() == 0
        server = StandaloneProcess(tmp_path / "store", namesrv_port=server.namesrv_port,
                                   broker_port=server.broker_port).start()
        client = RemotingClient()
        back = await pop_until(client, addr, "crash-g", "RPopCrash", len(unacked), invisible_ms=60_000)
        assert sorted(m.keys[0] for m in back) == sorted(unacked), "exactly the unacked ones, once each"
        assert all(m.reconsume_times == 1 for m in back)
        late = await pop(client, addr, "crash-g", "RPopCrash", poll_ms=1500)
        assert late.code == ResponseCode.POLLING_TIMEOUT, "no acked message comes again"
    finally:
        await client.close()
        server.kill()


def _metric(text: str, name: str, having: str = "") -> float:
    """The value of the first sample of ``name`` whose line holds each comma-separated label of ``having``."""
    for line in text.splitlines():
        if line.split("{")[0].split(" ")[0] == name and all(part in line for part in having.split(",") if part):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {having} not in /metrics")
