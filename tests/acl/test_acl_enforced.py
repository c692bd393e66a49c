"""A FerryMQ broker with aclEnable=true and FerryMQ's own clients signing as accounts:
what each account may do, the refusals a user sees, and a file changed under a running broker."""

from __future__ import annotations

import textwrap

import pytest

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from testkit.wait import wait_until
from tests.support import InProcessCluster

ADMIN = Credentials("admin0001", "admin-secret")
PRODUCER = Credentials("producer01", "producer-secret")
CONSUMER = Credentials("consumer01", "consumer-secret")


def acl_yaml(producer_topics: str = "[orders=PUB]") -> str:
    return textwrap.dedent(f"""\
        accounts:
          - accessKey: admin0001
            secretKey: admin-secret
            admin: true
          - accessKey: producer01
            secretKey: producer-secret
            defaultTopicPerm: DENY
            topicPerms: {producer_topics}
          - accessKey: consumer01
            secretKey: consumer-secret
            defaultGroupPerm: DENY
            topicPerms: [orders=SUB]
            groupPerms: [billing=SUB]
        """)


@pytest.fixture
async def secured(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(acl_yaml())
    cluster = InProcessCluster(tmp_path / "store", settings={"aclEnable": "true", "aclFile": str(acl_file)})
    await cluster.start()
    async with AdminClient(config=_config(cluster, ADMIN)) as admin:
        for topic in ("orders", "payments"):
            await admin.create_topic(topic, read_queues=1, write_queues=1)
    try:
        yield cluster, acl_file
    finally:
        await cluster.stop()


def _config(cluster: InProcessCluster, credentials: Credentials | None) -> ClientConfig:
    return ClientConfig(namesrv_addr=cluster.namesrv_addr, credentials=credentials)


async def _send(cluster, credentials, topic, body=b"hello"):
    async with Producer("acl-test-producer", config=_config(cluster, credentials), retry_times=0) as producer:
        return await producer.send(Message(topic, body))


async def _pull_all(cluster, credentials, topic, group="billing"):
    async with PullConsumer(group, config=_config(cluster, credentials)) as consumer:
        (mq,) = await consumer.fetch_queues(topic)
        return (await consumer.pull(mq, 0, max_nums=64)).messages


async def _stored(cluster, topic) -> int:
    return cluster.broker.store.max_offset(topic, 0)


async def test_each_account_does_what_it_may(secured):
    cluster, _ = secured
    async with Producer("acl-test-producer", config=_config(cluster, PRODUCER), retry_times=0) as producer:
        await producer.send(Message("orders", b"sync"))
        await producer.send_batch([Message("orders", b"batch-1"), Message("orders", b"batch-2")])
    messages = await _pull_all(cluster, CONSUMER, "orders")
    assert [m.body for m in messages] == [b"sync", b"batch-1", b"batch-2"]


@pytest.mark.parametrize("who, topic, reason", [
    (Credentials("producer01", "not-the-secret"), "orders", "Check signature failed for accessKey=producer01"),
    (Credentials("stranger1", "some-secret"), "orders", "No acl config for stranger1"),
    (None, "orders", "No accessKey is configured"),
    (PRODUCER, "payments", "No default permission for topic:payments"),
    (CONSUMER, "orders", "No default permission for topic:orders"),  # SUB only
])
async def test_a_refused_send_says_why_and_stores_nothing(secured, who, topic, reason):
    cluster, _ = secured
    with pytest.raises(MQBrokerError) as info:
        await _send(cluster, who, topic)
    assert info.value.code == 1 and info.value.remark == f"AclException: {reason}"
    assert await _stored(cluster, topic) == 0


async def test_consuming_needs_sub_on_the_topic_and_the_group(secured):
    cluster, _ = secured
    await _send(cluster, PRODUCER, "orders")
    with pytest.raises(MQBrokerError, match="No default permission for group:auditors"):
        await _pull_all(cluster, CONSUMER, "orders", group="auditors")
    with pytest.raises(MQBrokerError, match="No default permission for topic:orders"):
        await _pull_all(cluster, PRODUCER, "orders")
    assert len(await _pull_all(cluster, CONSUMER, "orders")) == 1


async def test_admin_requests_need_an_admin_account(secured):
    cluster, _ = secured
    async with AdminClient(config=_config(cluster, PRODUCER)) as admin:
        with pytest.raises(MQBrokerError, match="Need admin permission for request code=17, but accessKey=producer01"):
            await admin.create_topic("sneaky", read_queues=1, write_queues=1)
    assert "sneaky" not in cluster.broker.topics.table


async def test_a_changed_file_applies_without_a_restart(secured):
    cluster, acl_file = secured
    with pytest.raises(MQBrokerError, match="topic:payments"):
        await _send(cluster, PRODUCER, "payments")
    acl_file.write_text(acl_yaml("[orders=PUB, payments=PUB]"))
    await wait_until(lambda: cluster.broker.acl.config.accounts["producer01"].resource_perms.get("payments"),
                     timeout=10, what="the ACL file reloaded")
    await _send(cluster, PRODUCER, "payments")
    reloads = cluster.broker.acl.reloads
    acl_file.write_text(acl_yaml("[payments=PUB"))  # broken (unclosed list): the last good ACL stays
    await wait_until(lambda: cluster.broker.acl.rejected, timeout=10, what="the broken file noticed")
    await _send(cluster, PRODUCER, "payments")
    acl_file.write_text(acl_yaml("[orders=PUB]"))  # permission withdrawn
    await wait_until(lambda: cluster.broker.acl.reloads > reloads, timeout=10, what="the ACL file reloaded")
    with pytest.raises(MQBrokerError, match="topic:payments"):
        await _send(cluster, PRODUCER, "payments")
    assert await _stored(cluster, "payments") == 2


async def test_name_server_changes_need_an_admin_signature(tmp_path):
    from ferrymq.acl.signature import sign_request
    from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.remoting.codes import RequestCode
    from ferrymq.remoting.command import RemotingCommand

    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(acl_yaml())
    namesrv = NameServer(NamesrvConfig(listen_port=0, acl_enable=True, acl_file=str(acl_file)))
    await namesrv.start()
    client = RemotingClient()

    async def put_kv(credentials):
        request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG",
                                                                      "key": "orders", "value": "broker-a:4"})
        if credentials:
            sign_request(request, credentials)
        return await client.invoke(namesrv.address, request)

    try:
        refused = await put_kv(None)
        assert refused.code == 1 and refused.remark == "AclException: No accessKey is configured"
        refused = await put_kv(PRODUCER)
        assert "Need admin permission for request code=100, but accessKey=producer01" in refused.remark
        assert (await put_kv(ADMIN)).code == 0
        route = await client.invoke(namesrv.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert route.code == 0  # lookups stay open: clients and brokers find each other unsigned
    finally:
        await client.close()
        await namesrv.stop()


async def test_an_acl_update_that_would_break_the_file_is_refused(secured):
    from ferrymq.acl.signature import sign_request
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.remoting.codes import RequestCode
    from ferrymq.remoting.command import RemotingCommand

    cluster, acl_file = secured
    before = acl_file.read_text()
    client = RemotingClient()
    try:
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
            "accessKey": "newbie001", "secretKey": "newbie-secret", "topicPerms": "orders=PUBLISH"})
        sign_request(request, ADMIN)
        response = await client.invoke(cluster.broker_addr, request)
    finally:
        await client.close()
    assert response.code == 209 and "'PUBLISH' is none of DENY, PUB, SUB, PUB|SUB" in response.remark
    assert acl_file.read_text() == before


async def test_cli_signs_with_an_account_and_speaks_tls(tmp_path):
    """`ferrymq produce --access-key ... --tls-insecure`: the secret only from the environment."""
    import asyncio
    import os
    import sys
    from pathlib import Path

    from testkit.certificates import make_test_certificates

    certs = make_test_certificates(tmp_path / "certs")
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(acl_yaml())
    settings = {"aclEnable": "true", "aclFile": str(acl_file), "tlsMode": "permissive",
                "tlsServerCertPath": certs["server_cert"], "tlsServerKeyPath": certs["server_key"]}
    cluster = InProcessCluster(tmp_path / "store", settings=settings)
    from ferrymq.namesrv.name_server import NamesrvConfig, NameServer

    cluster.namesrv = NameServer(NamesrvConfig(listen_port=0, tls_mode="permissive",
                                               tls_server_cert_path=certs["server_cert"],
                                               tls_server_key_path=certs["server_key"]))
    await cluster.namesrv.start()
    await cluster.start_broker()

    async def cli(*args, secret=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_")}
        if secret:
            env["FERRYMQ_SECRET_KEY"] = secret
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ferrymq.cli.main", "produce", "-n", cluster.namesrv_addr, "-t", "orders",
            "-b", "from the cli", *args, env=env, cwd=Path(__file__).resolve().parents[2],
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode() + err.decode()

    try:
        async with AdminClient(config=_config(cluster, ADMIN)) as admin:
            await admin.create_topic("orders", read_queues=1, write_queues=1)
        rc, output = await cli("--access-key", "producer01", "--tls-insecure", secret="producer-secret")
        assert rc == 0, output
        assert "producer-secret" not in output
        rc, output = await cli("--access-key", "producer01")
        assert rc != 0 and "FERRYMQ_SECRET_KEY" in output
        rc, output = await cli("--tls", "--tls-ca-file", certs["ca"])
        assert rc != 0 and "No accessKey is configured" in output
        assert cluster.broker.store.max_offset("orders", 0) == 1
    finally:
        await cluster.stop()


async def test_async_sends_and_a_push_consumer_under_acl(secured):
    """The push consumer's heartbeats, pulls, offset commits and the async sends, all signed;
    a listener that fails sends messages back for retry (CONSUMER_SEND_MSG_BACK, group SUB)."""
    import asyncio

    from ferrymq.client.push_consumer import PushConsumer
    from tests.consumer_support import Recorder

    cluster, _ = secured
    rec = Recorder()
    consumer = PushConsumer("billing", config=_config(cluster, CONSUMER))
    consumer.subscribe("orders")
    first_tries: set[str] = set()

    def fail_once(m):
        key = m.keys[0]
        if key == "k-0" and key not in first_tries:
            first_tries.add(key)
            return True
        return False

    consumer.register_listener(rec.listener("c", fail=fail_once, result_on_fail="RECONSUME_LATER"))
    await consumer.start()
    try:
        async with Producer("acl-test-producer", config=_config(cluster, PRODUCER), retry_times=0) as producer:
            futures = []
            for i in range(10):
                m = Message("orders", f"async {i}".encode())
                m.keys = [f"k-{i}"]
                futures.append(producer.send_async(m))
            await asyncio.gather(*futures)
        await wait_until(lambda: {f"k-{i}" for i in range(10)} <= rec.keys() and len(rec.of("k-0")) >= 2, 30,
                         "every message consumed, k-0 again after its retry")
    finally:
        await consumer.shutdown()
    assert cluster.broker.offsets.query("billing", "orders", 0) == 10
