"""When a User is Ready: the operator's check that every broker accepts the User's signed
requests, against a real broker enforcing ACL from a file that changes as a mounted Secret does."""

from __future__ import annotations

import asyncio
import textwrap

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
from ferrymq_operator import broker_admin
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.reconcile_user import brokers_not_accepting
from ferrymq_operator.settings import OperatorSettings
from tests.support import InProcessCluster

OPERATOR = Credentials("ferrymq-operator", "operator-secret")
USER = Credentials("payments-app", "user-secret")


def accounts(*extra: str) -> str:
    return textwrap.dedent("""\
        accounts:
          - accessKey: ferrymq-operator
            secretKey: operator-secret
            admin: true
        """) + "".join(extra)


def user_account(secret: str) -> str:
    return f"  - accessKey: payments-app\n    secretKey: {secret}\n    defaultTopicPerm: DENY\n"


async def refusing(cluster: InProcessCluster, credentials: Credentials) -> dict[str, str]:
    async with AdminClient(config=ClientConfig(namesrv_addr=cluster.namesrv_addr, credentials=OPERATOR)) as admin:
        addrs = await admin.master_addrs()
    return await broker_admin.brokers_refusing(cluster.namesrv_addr, 3.0, credentials, None, addrs)


async def until(cluster, credentials, predicate) -> dict[str, str]:
    for _ in range(50):
        answer = await refusing(cluster, credentials)
        if predicate(answer):
            return answer
        await asyncio.sleep(0.1)
    raise AssertionError(f"still {answer}")


async def test_a_user_counts_as_loaded_only_once_the_broker_accepts_its_current_secret(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(accounts())
    cluster = InProcessCluster(tmp_path / "store", settings={"aclEnable": "true", "aclFile": str(acl_file)})
    await cluster.start()
    try:
        (name, why), = (await refusing(cluster, USER)).items()
        assert "No acl config for payments-app" in why
        acl_file.write_text(accounts(user_account("user-secret")))  # the kubelet refreshed the mount
        assert await until(cluster, USER, lambda r: not r) == {}
        # a rotated secret: the old one is still loaded, so the new one is refused until it is
        rotated = Credentials("payments-app", "rotated-secret")
        assert "Check signature failed" in (await refusing(cluster, rotated))[name]
        acl_file.write_text(accounts(user_account("rotated-secret")))
        await until(cluster, rotated, lambda r: not r)
        # an account that may do nothing (DENY by default) is still an account the broker knows
        assert await refusing(cluster, rotated) == {}
    finally:
        await cluster.stop()


async def test_an_unreachable_broker_is_not_taken_as_accepting():
    answer = await broker_admin.brokers_refusing("127.0.0.1:1", 1.0, USER, None, {"broker-a": "127.0.0.1:1"})
    assert list(answer) == ["broker-a"]


async def test_a_user_is_not_ready_while_no_broker_has_registered_yet():
    """A broker that has started but not registered may run with the file it loaded before the
    account was in it (seen on kind): no registered broker is no proof, unless none is wanted."""
    namesrv = NameServer(NamesrvConfig(listen_port=0))
    await namesrv.start()
    try:
        settings = OperatorSettings(namesrv_overrides={"*": namesrv.address})

        def broker(replicas: int) -> BrokerCluster:
            return BrokerCluster.from_resource({"metadata": {"name": "secure", "namespace": "ns"},
                                                "spec": {"replicas": replicas}})
        assert await brokers_not_accepting(broker(1), USER, settings) == {
            "brokers": "none registered with the name servers yet"}
        assert await brokers_not_accepting(broker(0), USER, settings) == {}
    finally:
        await namesrv.stop()
