"""Plain ACL against the official peers: the 4.9.7 Java client and mqadmin signing with
rocketmq-acl's AclClientRPCHook against FerryMQ, and FerryMQ's Python client signing
against a real Apache RocketMQ 4.9.7 broker with aclEnable=true (its own verifier)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from testkit.processes import StandaloneProcess

from testkit.apache import ApacheRocketMQ
from testkit.wait import poll_until
from tests.compat.test_msg_trace import held_client
from testkit.java_client import CompatError, JavaClient, run_mqadmin
from testkit.plain_acl import admin_and_app

pytestmark = pytest.mark.compat

ADMIN = Credentials("admin0001", "admin-secret")
APP = Credentials("orders-app", "app-secret-1")
ORDERS, PAYMENTS, GROUP = "AclOrders", "AclPayments", "acl_billing"
TRACE_TOPIC = "AclTrace"  # the FerryMQ broker's msgTraceTopicName; APP has no permission on it

PLAIN_ACL = admin_and_app(ADMIN, APP, [f"{ORDERS}=PUB|SUB", f"{PAYMENTS}=SUB"], [f"{GROUP}=SUB"])


def _config(namesrv: str, credentials: Credentials | None) -> ClientConfig:
    return ClientConfig(namesrv_addr=namesrv, credentials=credentials)


async def _create_topics(namesrv: str) -> None:
    async with AdminClient(config=_config(namesrv, ADMIN)) as admin:
        for topic in (ORDERS, PAYMENTS):
            await admin.create_topic(topic, read_queues=2, write_queues=2)


# ------------------------------------------------------------------ Java client -> FerryMQ


@pytest.fixture(scope="module")
def secured_ferrymq(tmp_path_factory, rocketmq_jars):
    work = tmp_path_factory.mktemp("ferrymq-acl")
    (work / "plain_acl.yml").write_text(PLAIN_ACL)
    server = StandaloneProcess(work / "store", ["aclEnable=true", f"aclFile={work / 'plain_acl.yml'}",
                                                "traceTopicEnable=true", f"msgTraceTopicName={TRACE_TOPIC}"]).start()
    try:
        asyncio.run(_create_topics(server.namesrv_addr))
        yield server
    finally:
        server.stop()


def _java(java_client: JavaClient, action: str, namesrv: str, topic: str, credentials: Credentials, **opts):
    args = [action, *JavaClient._opts(namesrv, topic, opts.pop("group", None), opts.pop("timeout_ms", 30000),
                                      access_key=credentials.access_key, secret_key=credentials.secret_key, **opts)]
    return java_client.run(args, 120, check=False)


def _stored(namesrv: str, topic: str) -> int:
    async def count() -> int:
        async with PullConsumer(GROUP, config=_config(namesrv, APP)) as consumer:
            return sum([await consumer.max_offset(mq) for mq in await consumer.fetch_queues(topic)])
    return asyncio.run(count())


def test_java_client_with_an_account_sends_every_way_and_push_consumes(secured_ferrymq, java_client):
    events = _java(java_client, "produce-consume", secured_ferrymq.namesrv_addr, ORDERS, APP, group=GROUP,
                   count=10, modes=["sync", "async", "batch"], timeout_ms=40000)
    done = events.done
    assert done and done["ok"], events
    assert done["sent"] == {"sync": 10, "async": 10, "batch": 10}
    assert len({e["key"] for e in events.of("received")}) == 30


@pytest.mark.parametrize("credentials, topic, reason", [
    (Credentials(APP.access_key, "not-the-secret"), ORDERS, f"Check signature failed for accessKey={APP.access_key}"),
    (Credentials("stranger01", "some-secret"), ORDERS, "No acl config for stranger01"),
    (APP, PAYMENTS, f"No default permission for topic:{PAYMENTS}"),
])
def test_java_sends_refused_with_the_reason_and_nothing_stored(secured_ferrymq, java_client, credentials, topic,
                                                                reason):
    before = _stored(secured_ferrymq.namesrv_addr, topic)
    events = _java(java_client, "produce", secured_ferrymq.namesrv_addr, topic, credentials, count=1,
                   modes=["sync"], timeout_ms=20000)
    failures = events.of("send_failed")
    assert failures and f"AclException: {reason}" in failures[0]["error"], events
    assert _stored(secured_ferrymq.namesrv_addr, topic) == before


def test_java_consumer_of_a_group_without_sub_gets_nothing(secured_ferrymq, java_client):
    _java(java_client, "produce", secured_ferrymq.namesrv_addr, ORDERS, APP, count=3, modes=["sync"])
    events = _java(java_client, "consume", secured_ferrymq.namesrv_addr, ORDERS, APP, group="acl_intruders",
                   expect_count=1, timeout_ms=8000)
    assert not events.of("received") and events.done and not events.done["ok"]
    assert "denied: No default permission for group:acl_intruders" in secured_ferrymq.log()


def test_mqadmin_signs_and_only_admins_create_topics(secured_ferrymq):
    namesrv = secured_ferrymq.namesrv_addr
    out = run_mqadmin(namesrv, "updateTopic", "-c", "DefaultCluster", "-t", "AclByAdmin", credentials=(
        ADMIN.access_key, ADMIN.secret_key))
    assert "create topic to" in out and "success" in out
    status = run_mqadmin(namesrv, "topicStatus", "-t", ORDERS, credentials=(ADMIN.access_key, ADMIN.secret_key))
    assert "#Max Offset" in status and "broker-a" in status  # GET_TOPIC_STATS_INFO, signed
    with pytest.raises(CompatError, match=f"Need admin permission for request code=17, but accessKey={APP.access_key}"):
        run_mqadmin(namesrv, "updateTopic", "-c", "DefaultCluster", "-t", "AclByApp",
                    credentials=(APP.access_key, APP.secret_key))


def test_java_client_trace_records_reach_the_brokers_configured_trace_topic(secured_ferrymq):
    """docs/trace.md#acl: like RMQ_SYS_TRACE_TOPIC on Apache, the broker's own trace topic
    (msgTraceTopicName) takes any signed account's trace records, whatever its topic perms."""
    namesrv = secured_ferrymq.namesrv_addr
    with held_client(["produce-consume", "--namesrv", namesrv, "--topic", ORDERS, "--group", GROUP,
                      "--count", "1", "--modes", "sync", "--trace-topic", TRACE_TOPIC, "--hold", "true",
                      "--access-key", APP.access_key, "--secret-key", APP.secret_key,
                      "--timeout-ms", "90000"]) as events:
        (sent,) = [e for e in events if e["event"] == "sent"]

        async def traced() -> set[str]:
            async with AdminClient(config=_config(namesrv, ADMIN)) as admin:
                return {e.type for e in (await admin.message_trace(sent["msgId"], TRACE_TOPIC)).events}
        types = poll_until("the publish and consume trace records", lambda: (
            found if {"Pub", "SubBefore", "SubAfter"} <= (found := asyncio.run(traced())) else None),
            timeout=60, interval=0.5)
    assert types == {"Pub", "SubBefore", "SubAfter"}


# ------------------------------------------------------------------ Python client -> Apache RocketMQ


@pytest.fixture(scope="module")
def apache_with_acl(rocketmq_jars):
    mq = ApacheRocketMQ(broker_conf={"aclEnable": "true"}, plain_acl=PLAIN_ACL)
    mq.start()
    try:
        asyncio.run(_create_topics(mq.namesrv_addr))
        yield mq
    finally:
        mq.stop()


def test_python_client_signatures_pass_apaches_verifier(apache_with_acl):
    namesrv = apache_with_acl.namesrv_addr
    body = f"signed {uuid.uuid4()}".encode()

    async def scenario() -> list[bytes]:
        async with Producer("acl_py_producer", config=_config(namesrv, APP), retry_times=0) as producer:
            await producer.send(Message(ORDERS, body, properties={"KEYS": "k1"}))
            await producer.send_batch([Message(ORDERS, body + b"-b1"), Message(ORDERS, body + b"-b2")])
        got = []
        async with PullConsumer(GROUP, config=_config(namesrv, APP)) as consumer:
            for mq in await consumer.fetch_queues(ORDERS):
                got += [m.body for m in (await consumer.pull(mq, 0, max_nums=64)).messages]
        return got

    assert sorted(asyncio.run(scenario())) == sorted([body, body + b"-b1", body + b"-b2"])


@pytest.mark.parametrize("credentials, topic, reason", [
    (Credentials(APP.access_key, "not-the-secret"), ORDERS, f"Check signature failed for accessKey={APP.access_key}"),
    (Credentials("stranger01", "some-secret"), ORDERS, "No acl config for stranger01"),
    (APP, PAYMENTS, f"No default permission for topic:{PAYMENTS}"),
])
def test_apache_refuses_what_ferrymq_refuses(apache_with_acl, credentials, topic, reason):
    async def send() -> None:
        async with Producer("acl_py_producer", config=_config(apache_with_acl.namesrv_addr, credentials),
                            retry_times=0) as producer:
            await producer.send(Message(topic, b"x"))

    with pytest.raises(MQBrokerError) as info:
        asyncio.run(send())
    assert info.value.code == 1 and "AclException" in info.value.remark and reason in info.value.remark


def test_mqadmin_manages_accounts_on_a_running_broker(secured_ferrymq):
    namesrv = secured_ferrymq.namesrv_addr
    admin = (ADMIN.access_key, ADMIN.secret_key)
    newbie = Credentials("newbie001", "newbie-secret")

    async def send(credentials: Credentials) -> None:
        async with Producer("acl_newbie_producer", config=_config(namesrv, credentials), retry_times=0) as producer:
            await producer.send(Message(ORDERS, b"from a new account"))

    with pytest.raises(CompatError, match="Need admin permission for request code=50"):
        run_mqadmin(namesrv, "updateAclConfig", "-c", "DefaultCluster", "-a", newbie.access_key, "-s",
                    newbie.secret_key, credentials=(APP.access_key, APP.secret_key))
    out = run_mqadmin(namesrv, "updateAclConfig", "-c", "DefaultCluster", "-a", newbie.access_key, "-s",
                      newbie.secret_key, "-t", f"{ORDERS}=PUB", credentials=admin)
    assert "create or update plain access config to" in out
    asyncio.run(send(newbie))
    versions = run_mqadmin(namesrv, "clusterAclConfigVersion", "-c", "DefaultCluster", credentials=admin)
    assert "broker-a" in versions
    run_mqadmin(namesrv, "deleteAccessConfig", "-c", "DefaultCluster", "-a", newbie.access_key, credentials=admin)
    with pytest.raises(MQBrokerError, match="No acl config for newbie001"):
        asyncio.run(send(newbie))
