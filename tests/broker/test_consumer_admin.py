"""Consumer-group requests on the wire: heartbeats and the group's member list with
NOTIFY_CONSUMER_IDS_CHANGED, subscription groups (200/201/207), consume stats (208),
connections (203), queue locks (41/42); and the same through the admin client and CLI."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.consumer_protocol import build_subscription
from ferrymq.common import rocketmq_json
from ferrymq.common.consumer_protocol import LockBatchRequestBody, LockBatchResponseBody, UnlockBatchRequestBody
from ferrymq.common.protocol import ConsumerData, ConsumerListBody, HeartbeatData, MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import Recorder, create_topic, produce
from testkit.wait import wait_until
from testkit.processes import REPO
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration


class RawClient:
    """A bare remoting client that heartbeats as one consumer and records broker->client requests."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.notified: list[RemotingCommand] = []
        self.remoting = RemotingClient(request_handler=self._on_request)

    async def _on_request(self, request: RemotingCommand, conn) -> None:
        self.notified.append(request)

    async def call(self, addr: str, code: int, fields: dict | None = None, body: bytes | None = None) -> RemotingCommand:
        return await self.remoting.invoke(addr, RemotingCommand.request(code, fields, body), 3.0)

    async def heartbeat(self, addr: str, group: str, topic: str) -> RemotingCommand:
        data = HeartbeatData(client_id=self.client_id, consumer_data_set=[ConsumerData(
            group_name=group, subscription_data_set=[build_subscription(topic, "*")])])
        return await self.call(addr, RequestCode.HEART_BEAT, body=data.to_json())

    async def close(self) -> None:
        await self.remoting.close()


async def test_heartbeat_member_list_notify_unregister_and_expiry(cluster):
    addr, broker = cluster.broker_addr, cluster.broker
    a, b = RawClient("10.0.0.1@a"), RawClient("10.0.0.2@b")
    try:
        assert (await a.heartbeat(addr, "members", "T")).code == ResponseCode.SUCCESS
        assert "%RETRY%members" in broker.topics.table, "the broker creates the group's retry topic"
        await b.heartbeat(addr, "members", "T")
        await wait_until(lambda: any(r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED for r in a.notified), 5,
                         "NOTIFY_CONSUMER_IDS_CHANGED to the first member")
        notice = next(r for r in a.notified if r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
        assert notice.is_oneway and notice.get_str("consumerGroup") == "members"
        listing = await a.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
        assert ConsumerListBody.from_json(listing.body).consumer_id_list == ["10.0.0.1@a", "10.0.0.2@b"]

        # A changed subscription is a group change too.
        a.notified.clear()
        await b.heartbeat(addr, "members", "OtherT")
        await wait_until(lambda: a.notified, 5, "a notification of b's new subscription")

        a.notified.clear()
        await b.call(addr, RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.2@b", "consumerGroup": "members"})
        await wait_until(lambda: a.notified, 5, "a notification that b left")
        listing = await a.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
        assert ConsumerListBody.from_json(listing.body).consumer_id_list == ["10.0.0.1@a"]

        # No heartbeat for channelExpiredTimeout: the broker's expiry scan drops the member.
        broker.config.channel_expired_timeout = 200
        seen = time.monotonic()
        await wait_until(lambda: time.monotonic() - seen > 0.25, 5, "the heartbeat to age")
        await broker._expire_clients()
        listing = await a.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
        assert listing.code == ResponseCode.SYSTEM_ERROR and listing.remark == "no consumer for this group, members"
    finally:
        await a.close()
        await b.close()


async def test_subscription_groups_create_list_delete_and_persist(cluster, tmp_path):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    async with AdminClient(namesrv_addr=ns) as admin:
        assert await admin.create_group("billing", retry_max_times=5, consume_broadcast_enable=False) == [addr]
        groups = await admin.list_groups()
        config = groups["billing"]["broker-a"]
        assert (config.retry_max_times, config.consume_broadcast_enable, config.consume_enable) == (5, False, True)
        assert "TOOLS_CONSUMER" in groups, "built-in groups are listed too"
        saved = rocketmq_json.loads((tmp_path / "store" / "config" / "subscriptionGroup.json").read_text())
        assert saved["subscriptionGroupTable"]["billing"]["retryMaxTimes"] == 5
        await admin.disable_group("billing")
        assert (await admin.group_configs(addr))["billing"].consume_enable is False
        assert (await admin.group_configs(addr))["billing"].retry_max_times == 5, "other settings kept"
        await admin.delete_group("billing", remove_offsets=True)
        assert "billing" not in await admin.group_configs(addr)


async def test_consume_stats_and_connections(cluster):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    await create_topic(ns, "StatsT", 2)
    rec = Recorder()
    consumer = PushConsumer("stats-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("StatsT").register_listener(rec.listener("c"))
    await consumer.start()
    try:
        sent = await produce(ns, "StatsT", 10, prefix="s")
        await wait_until(lambda: len(rec.keys()) == 10, 20, "10 consumed")
        # The listener saw them; their offsets advance once the listener calls have returned.
        await wait_until(lambda: consumer.consumed >= 10, 20, "10 consumptions finished")
        await consumer.offset_store.persist_all(set(consumer.rebalancer.process_queues), oneway=False)
        async with AdminClient(namesrv_addr=ns) as admin:
            conns = await admin.consumer_connections("stats-group")
            assert [c.client_id for c in conns.connection_set] == [consumer.client_id]
            assert conns.connection_set[0].language == "PYTHON"
            assert set(conns.subscription_table) == {"StatsT", "%RETRY%stats-group"}
            assert conns.message_model == "CLUSTERING" and conns.consume_type == "CONSUME_PASSIVELY"
            stats = await admin.consume_stats("stats-group", topic="StatsT")
    finally:
        await consumer.shutdown()
    await produce(ns, "StatsT", 3, prefix="more")  # nobody consumes these: lag
    per_queue = {mq.queue_id: w for mq, w in stats.offset_table.items()}
    sent_per_queue = {q: sum(1 for s in sent if s.message_queue.queue_id == q) for q in (0, 1)}
    assert {q: (w.broker_offset, w.consumer_offset) for q, w in per_queue.items()} == {
        q: (n, n) for q, n in sent_per_queue.items()}
    assert all(w.last_timestamp > 0 for w in per_queue.values() if w.consumer_offset)
    assert stats.consume_enable is True and stats.total_lag() == 0

    raw = RawClient("x@y")
    try:
        response = await raw.call(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "stats-group", "topic": "StatsT"})
        # fastjson's form: MessageQueue objects as map keys
        assert b'"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"StatsT"}:{"brokerOffset":' in response.body
        offline = await raw.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "stats-group"})
        assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    finally:
        await raw.close()
    async with AdminClient(namesrv_addr=ns) as admin:
        lagging = await admin.consume_stats("stats-group", topic="StatsT")
    assert lagging.total_lag() == 3


async def test_queue_locks_exclusive_released_and_expired(tmp_path):
    cluster = InProcessCluster(tmp_path / "store", settings={"rebalanceLockMaxLiveTime": 300})
    await cluster.start()
    a, b = RawClient("a"), RawClient("b")
    addr = cluster.broker_addr
    mqs = [MessageQueue("LockT", "broker-a", q) for q in range(3)]

    async def lock(client: RawClient, queues) -> set[MessageQueue]:
        body = LockBatchRequestBody(consumer_group="lockers", client_id=client.client_id, mq_set=list(queues)).to_json()
        response = await client.call(addr, RequestCode.LOCK_BATCH_MQ, body=body)
        assert response.code == ResponseCode.SUCCESS
        return set(LockBatchResponseBody.from_json(response.body).lock_ok_mq_set)

    try:
        assert await lock(a, mqs[:2]) == set(mqs[:2])
        assert await lock(b, mqs) == {mqs[2]}, "b only gets what a does not hold"
        assert await lock(a, mqs[:2]) == set(mqs[:2]), "renewal by the holder"
        body = UnlockBatchRequestBody(consumer_group="lockers", client_id="a", mq_set=[mqs[0]]).to_json()
        assert (await a.call(addr, RequestCode.UNLOCK_BATCH_MQ, body=body)).code == ResponseCode.SUCCESS
        assert await lock(b, mqs) == {mqs[0], mqs[2]}
        renewed = time.monotonic()
        await wait_until(lambda: time.monotonic() - renewed > 0.35, 5, "a's lease on queue 1 to lapse")
        assert await lock(b, [mqs[1]]) == {mqs[1]}, "an expired lock is taken over"
    finally:
        await a.close()
        await b.close()
        await cluster.stop()


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "ferrymq.cli.main", *args, cwd=REPO,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_cli_group_commands(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "CliT", 2)
    rc, out, err = await run_cli("admin", "group", "create", "cli-group", "--retry-max-times", "3", "-n", ns, "--json")
    assert rc == 0, err
    assert json.loads(out)["retry_max_times"] == 3
    rc, out, _ = await run_cli("admin", "group", "list", "-n", ns)
    assert rc == 0 and "cli-group" in out

    rec = Recorder()
    consumer = PushConsumer("cli-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("CliT").register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await produce(ns, "CliT", 6, prefix="c")
        await wait_until(lambda: len(rec.keys()) == 6, 20, "6 consumed")
        await wait_until(lambda: consumer.consumed >= 6, 20, "6 consumptions finished")
        await consumer.offset_store.persist_all(set(consumer.rebalancer.process_queues), oneway=False)

        rc, out, err = await run_cli("admin", "group", "progress", "cli-group", "-t", "CliT", "-n", ns, "--json")
        assert rc == 0, err
        progress = json.loads(out)
        assert progress["consumeEnable"] is True and progress["totalLag"] == 0
        assert progress["members"] == [consumer.client_id]
        assert sum(q["consumerOffset"] for q in progress["queues"]) == 6

        rc, out, err = await run_cli("admin", "group", "disable", "cli-group", "-n", ns)
        assert rc == 0 and "disabled" in out, err
        rc, out, _ = await run_cli("admin", "group", "progress", "cli-group", "-n", ns)
        assert "DISABLED" in out
        rc, out, err = await run_cli("admin", "group", "enable", "cli-group", "-n", ns)
        assert rc == 0 and "enabled" in out, err

        rc, out, err = await run_cli("admin", "group", "reset-offset", "cli-group", "-t", "CliT", "--to", "earliest",
                                     "-n", ns, "--json")
        assert rc == 0, err
        assert {q["offset"] for q in json.loads(out)["queues"]} == {0}
        await wait_until(lambda: len(rec.events) == 12, 20, "the 6 messages again after the reset")
    finally:
        await consumer.shutdown()
    rc, _, err = await run_cli("admin", "group", "reset-offset", "cli-group", "-t", "CliT", "--to", "yesterday", "-n", ns)
    assert rc != 0 and "--to must be" in err
    rc, _, err = await run_cli("admin", "group", "progress", "no-such-group", "-n", ns)
    assert rc != 0 and "no consume progress" in err


async def test_cli_group_delete_removes_the_group_and_optionally_its_offsets(cluster):
    ns = cluster.namesrv_addr
    rc, _, err = await run_cli("admin", "group", "create", "doomed", "-n", ns)
    assert rc == 0, err
    cluster.broker.offsets.commit("doomed", "SomeTopic", 0, 5)
    rc, out, err = await run_cli("admin", "group", "delete", "doomed", "--remove-offsets", "-n", ns, "--json")
    assert rc == 0, err
    assert json.loads(out) == {"group": "doomed", "deleted": True, "offsetsRemoved": True}
    assert "doomed" not in cluster.broker.groups.table
    assert cluster.broker.offsets.query("doomed", "SomeTopic", 0) == -1
