"""RocketMQ 5 consumers where 4.x ones are seen (issue 17 item 3): a gRPC SimpleConsumer (the v2
stub, as tests/grpc does) and a POP receiver over remoting appear in the group's connection list
(admin API and ``ferrymq admin group clients``), counted by protocol on /metrics, with POP lag on
the same lag series as pulls; and a 4.x push consumer of the same group still owns every queue
(gRPC clients are not in GET_CONSUMER_LIST_BY_GROUP, so no rebalance allocates them queues)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

import grpc
import pytest
from prometheus_client import generate_latest

from ferrymq.client.admin import AdminClient
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.consumer_protocol import build_subscription
from ferrymq.common.message import decode_records
from ferrymq.common.protocol import ConsumerData, ConsumerListBody, HeartbeatData
from ferrymq.grpc.messages import to_duration
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import Recorder, create_topic, produce
from testkit.processes import REPO
from testkit.wait import wait_until
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

GRPC_ID = "java-simple@host-1"
CLIENT = (("x-mq-client-id", GRPC_ID), ("x-mq-language", "JAVA"), ("x-mq-protocol", "v2"),
          ("x-mq-client-version", "5.0.7"))


@pytest.fixture
async def cluster(tmp_path):
    c = await InProcessCluster(tmp_path / "a", settings={"grpcListenPort": 0}).start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def stub(cluster):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.broker.grpc.port}") as channel:
        yield rpc.MessagingServiceStub(channel)


def metric(cluster, name: str, **labels: str) -> float | None:
    text = generate_latest(cluster.broker.metrics_registry).decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "ferrymq.cli.main", *args, cwd=REPO,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def simple_consumer_online(stub, group: str, topic: str, expression: str,
                                 filter_type=pb.FilterType.TAG) -> None:
    """What a 5.x SimpleConsumer does at start: its settings on Telemetry, then a heartbeat."""
    call = stub.Telemetry(metadata=CLIENT, timeout=10)
    await call.write(spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.ClientType.SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=filter_type,
                                                                          expression=expression))]))))
    assert (await call.read()).status.code == Code.OK
    await call.done_writing()
    beat = await stub.Heartbeat(spb.HeartbeatRequest(group=pb.Resource(name=group),
                                                     client_type=pb.ClientType.SIMPLE_CONSUMER),
                                metadata=CLIENT, timeout=5)
    assert beat.status.code == Code.OK


async def test_grpc_consumer_is_listed_counted_and_owns_no_queue(cluster, stub):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    topic, group = f"Mixed_{uuid.uuid4().hex[:6]}", "mixed-g"
    await create_topic(ns, topic, 4)
    await simple_consumer_online(stub, group, topic, "TagA || TagB")

    rec = Recorder()
    consumer = PushConsumer(group, namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic).register_listener(rec.listener("c"))
    await consumer.start()
    client = RemotingClient()
    try:
        # the 4.x rebalance input names the 4.x member only: it takes every queue
        listed = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                   {"consumerGroup": group}))
        assert ConsumerListBody.from_json(listed.body).consumer_id_list == [consumer.client_id]
        await produce(ns, topic, 12)
        await wait_until(lambda: len(rec.keys()) == 12, 20, "all 12 consumed by the 4.x member")
        assert {mq.queue_id for mq in consumer.rebalancer.process_queues if mq.topic == topic} == {0, 1, 2, 3}

        async with AdminClient(namesrv_addr=ns) as admin:
            conns = await admin.consumer_connections(group)
        by_id = {c.client_id: c for c in conns.connection_set}
        assert set(by_id) == {consumer.client_id, GRPC_ID}
        g = by_id[GRPC_ID]
        assert (g.protocol, g.language, g.client_version) == ("gRPC v2", "JAVA", "5.0.7")
        assert g.client_addr.startswith("127.0.0.1:") and g.subscriptions == {topic: "TagA || TagB"}
        assert by_id[consumer.client_id].protocol == "remoting" and by_id[consumer.client_id].language == "PYTHON"
        assert conns.consume_type == "CONSUME_PASSIVELY", "group fields stay the 4.x members'"

        rc, out, err = await run_cli("admin", "group", "clients", group, "-n", ns, "--json")
        assert rc == 0, err
        shown = json.loads(out)
        assert shown["onlineByProtocol"] == {"gRPC v2": 1, "remoting": 1}
        assert {(c["clientId"], c["protocol"], c["version"]) for c in shown["clients"]} >= {(GRPC_ID, "gRPC v2", "5.0.7")}
        rc, out, err = await run_cli("admin", "group", "clients", group, "-n", ns)
        assert rc == 0, err
        assert GRPC_ID in out and "gRPC v2" in out and f"{topic}: TagA || TagB" in out
        assert "2 client(s) online (1 gRPC v2, 1 remoting)" in out
        rc, out, err = await run_cli("admin", "group", "progress", group, "-n", ns, "--json")
        assert rc == 0, err
        assert json.loads(out)["onlineByProtocol"] == {"gRPC v2": 1, "remoting": 1}

        assert metric(cluster, "ferrymq_broker_group_online_clients", group=group, protocol="gRPC v2") == 1
        assert metric(cluster, "ferrymq_broker_group_online_clients", group=group, protocol="remoting") == 1

        # the 5.x client shuts down: gone from the list and the gauge
        done = await stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(group=pb.Resource(name=group)),
                                                  metadata=CLIENT, timeout=5)
        assert done.status.code == Code.OK
        async with AdminClient(namesrv_addr=ns) as admin:
            conns = await admin.consumer_connections(group)
        assert [c.client_id for c in conns.connection_set] == [consumer.client_id]
        assert metric(cluster, "ferrymq_broker_group_online_clients", group=group, protocol="gRPC v2") == 0
    finally:
        await client.close()
        await consumer.shutdown()


async def test_pop_receivers_are_listed_with_their_lag(cluster, stub):
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    topic = f"PopSeen_{uuid.uuid4().hex[:6]}"
    await create_topic(ns, topic, 1)
    await produce(ns, topic, 5)
    client = RemotingClient()
    try:
        # a remoting POP receiver (POP_MESSAGE): no heartbeat, seen by its receives
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "pop-seen", "topic": topic, "queueId": -1, "maxMsgNums": 5, "invisibleTime": 60_000,
            "pollTime": 0, "bornTime": int(time.time() * 1000), "initMode": 0, "expType": "TAG", "exp": "*",
            "order": False}), 5)
        assert r.code == ResponseCode.SUCCESS
        got = decode_records(r.body)
        # what the receiver subscribes is what its last receive asked for
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "pop-seen", "topic": topic, "queueId": -1, "maxMsgNums": 1, "invisibleTime": 60_000,
            "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG", "exp": "TagA || TagB", "order": False}), 5)
        assert r.code == ResponseCode.POLLING_TIMEOUT, "all five are out"
        first = min(got, key=lambda m: m.queue_offset)
        acked = await client.invoke(addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": "pop-seen", "topic": topic, "queueId": 0, "offset": first.queue_offset,
            "extraInfo": first.properties["POP_CK"]}))
        assert acked.code == ResponseCode.SUCCESS
        # a gRPC receiver without a heartbeat: listed once, as gRPC (its receives are POP ones too)
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name="grpc-seen"), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=2,
            invisible_duration=to_duration(60_000), long_polling_timeout=to_duration(0))
        received = [x async for x in stub.ReceiveMessage(request, metadata=CLIENT, timeout=10)]
        assert sum(1 for x in received if x.HasField("message")) == 2

        async with AdminClient(namesrv_addr=ns) as admin:
            pop_conns = await admin.consumer_connections("pop-seen")
            grpc_conns = await admin.consumer_connections("grpc-seen")
        [p] = pop_conns.connection_set
        assert p.protocol == "POP" and p.client_addr.startswith("127.0.0.1:")
        assert p.subscriptions == {topic: "TagA || TagB"}
        assert p.language == "PYTHON" and p.version > 0, "what its requests say"
        assert pop_conns.consume_type == "CONSUME_POP" and topic in pop_conns.subscription_table
        assert [(c.client_id, c.protocol) for c in grpc_conns.connection_set] == [(GRPC_ID, "gRPC v2")]

        assert metric(cluster, "ferrymq_broker_group_online_clients", group="pop-seen", protocol="POP") == 1
        assert metric(cluster, "ferrymq_broker_group_online_clients", group="grpc-seen", protocol="POP") == 0
        # one of five acked: four not consumed, on the series 4.x groups' lag is on
        assert metric(cluster, "ferrymq_broker_group_lag_messages", group="pop-seen", topic=topic) == 4
        rc, out, err = await run_cli("admin", "group", "progress", "pop-seen", "-n", ns)
        assert rc == 0, err
        assert "total lag 4, 1 member(s) online (1 POP)" in out
    finally:
        await client.close()


async def test_a_pop_consumer_that_heartbeats_is_listed_once_as_pop(cluster):
    """Apache's 5.x remoting POP consumers also heartbeat (consumeType CONSUME_POP) on the
    connection they receive on: one client, protocol POP, named by its heartbeat's client id."""
    ns, addr = cluster.namesrv_addr, cluster.broker_addr
    topic = f"PopBeat_{uuid.uuid4().hex[:6]}"
    await create_topic(ns, topic, 1)
    client = RemotingClient()
    try:
        beat = HeartbeatData(client_id="10.1.1.1@pop-java", consumer_data_set=[ConsumerData(
            group_name="pop-beat", consume_type="CONSUME_POP", subscription_data_set=[build_subscription(topic, "*")])])
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=beat.to_json()))
        assert r.code == ResponseCode.SUCCESS
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "pop-beat", "topic": topic, "queueId": -1, "maxMsgNums": 1, "invisibleTime": 60_000,
            "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG", "exp": "*", "order": False}), 5)
        assert r.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), r.remark
        async with AdminClient(namesrv_addr=ns) as admin:
            conns = await admin.consumer_connections("pop-beat")
        assert [(c.client_id, c.protocol) for c in conns.connection_set] == [("10.1.1.1@pop-java", "POP")]
        assert conns.consume_type == "CONSUME_POP"
        assert metric(cluster, "ferrymq_broker_group_online_clients", group="pop-beat", protocol="POP") == 1
    finally:
        await client.close()


async def test_a_grpc_sql_subscription_is_listed_as_sql92(cluster, stub):
    topic = f"Sql_{uuid.uuid4().hex[:6]}"
    await create_topic(cluster.namesrv_addr, topic, 1)
    await simple_consumer_online(stub, "sql-g", topic, "region = 'eu' OR amount > 10", pb.FilterType.SQL)
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        conns = await admin.consumer_connections("sql-g")
    sub = conns.subscription_table[topic]
    assert (sub.expression_type, sub.sub_string) == ("SQL92", "region = 'eu' OR amount > 10")
    assert not sub.tags_set, "not split into tags"


async def test_nobody_online_is_still_consumer_not_online(cluster):
    rc, _, err = await run_cli("admin", "group", "clients", "nobody-g", "-n", cluster.namesrv_addr)
    assert rc != 0 and "no online consumer" in err
    rc, out, _ = await run_cli("admin", "group", "clients", "nobody-g", "-n", cluster.namesrv_addr, "--json")
    assert rc == 0 and json.loads(out)["clients"] == []


async def test_clients_that_go_quiet_leave_after_channel_expired_timeout(tmp_path):
    c = await InProcessCluster(tmp_path / "quiet", settings={"grpcListenPort": 0,
                                                             "channelExpiredTimeout": 1500}).start()
    client = RemotingClient()
    try:
        ns, addr = c.namesrv_addr, c.broker_addr
        topic = f"Quiet_{uuid.uuid4().hex[:6]}"
        await create_topic(ns, topic, 1)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            stub = rpc.MessagingServiceStub(channel)
            await simple_consumer_online(stub, "quiet-g", topic, "*")
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
                "consumerGroup": "quiet-pop", "topic": topic, "queueId": -1, "maxMsgNums": 1, "invisibleTime": 60_000,
                "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG", "exp": "*", "order": False}), 5)
            assert r.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT)

            async def online(group: str) -> list[str]:
                async with AdminClient(namesrv_addr=ns) as admin:
                    conns = await admin.consumer_connections(group)
                return [x.protocol for x in conns.connection_set] if conns else []

            assert await online("quiet-g") == ["gRPC v2"] and await online("quiet-pop") == ["POP"]
            await asyncio.sleep(2.0)  # no heartbeat, no receive: both gone
            assert await online("quiet-g") == [] and await online("quiet-pop") == []
            assert metric(c, "ferrymq_broker_group_online_clients", group="quiet-g") is None
            beat = await stub.Heartbeat(spb.HeartbeatRequest(group=pb.Resource(name="quiet-g"),
                                                             client_type=pb.ClientType.SIMPLE_CONSUMER),
                                        metadata=CLIENT, timeout=5)
            assert beat.status.code == Code.OK
            assert await online("quiet-g") == ["gRPC v2"], "a heartbeat brings it back"
    finally:
        await client.close()
        await c.stop()
