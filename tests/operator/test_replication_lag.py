"""What the operator makes of replication lag: each slave's lag read from its group's master
(a real master and slave here), matched to the slave pod by IP, shown in status.replication
with the group's inSync, and holding back a master's restart until its slaves caught up
(MasterRestartBlocked with its reason)."""

from __future__ import annotations

from ferrymq.broker.broker import Broker
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.store.config import StoreConfig
from ferrymq_operator import broker_admin, rollout, status
from ferrymq_operator.broker_admin import ObservedBroker, SlaveLag
from ferrymq_operator.constants import ANN_CONFIG_HASH, LABEL_COMPONENT
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.replication_lag import GroupLag, match_links
from ferrymq_operator.replication_roles import all_group_roles
from testkit.wait import wait_until
from tests.support import InProcessCluster


def pod(name: str, component: str = "broker-s1", hash_: str = "new", ready: bool = True, ip: str | None = None) -> dict:
    return {"metadata": {"name": name, "labels": {LABEL_COMPONENT: component}, "annotations": {ANN_CONFIG_HASH: hash_}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {})}}


# ------------------------------------------------------------------ reading the lag from the master

async def test_the_lag_of_each_slave_is_read_from_its_groups_master(tmp_path):
    cluster = InProcessCluster(tmp_path / "master", settings={"brokerName": "demo-broker-0",
                                                              "brokerClusterName": "demo"})
    await cluster.start()
    slave = None
    try:
        master = cluster.broker
        slave_config = BrokerConfig(listen_port=0, namesrv_addr=cluster.namesrv_addr, broker_name="demo-broker-0",
                                    broker_cluster_name="demo", broker_id=1, broker_role="SLAVE",
                                    ha_master_address=f"127.0.0.1:{master.replication.ha_port}")
        slave = Broker(slave_config, StoreConfig(store_path_root_dir=str(tmp_path / "slave"),
                                                 mapped_file_size_commit_log=4 * 1024 * 1024))
        await slave.start()
        producer = Producer("lag-producer", namesrv_addr=cluster.namesrv_addr)
        async with broker_admin.connect(cluster.namesrv_addr, 3.0) as admin:
            await admin.create_topic("LagTopic", broker_addr=master.address)
            await producer.start()
            try:
                await producer.send(Message("LagTopic", b"x" * 1000))
            finally:
                await producer.close()

            async def level():
                lags = await broker_admin.replication_lags(admin, "demo", ["demo-broker-0", "demo-broker-9"])
                return lags if lags["demo-broker-0"] and lags["demo-broker-0"][0].bytes == 0 else None

            lags = await wait_until(level, 20, "the slave level with its master")
            members = await broker_admin.group_members(admin, "demo", ["demo-broker-0", "demo-broker-9"])
        # Each registered broker of the group says what it is (the operator's view of the roles).
        assert [(m.broker_id, m.reachable, m.role, m.identity) for m in members["demo-broker-0"]] == [
            (0, True, "ASYNC_MASTER", None), (1, True, "SLAVE", None)]
        assert members["demo-broker-0"][0].slaves == lags["demo-broker-0"] and members["demo-broker-9"] is None
        (link,) = lags["demo-broker-0"]
        assert link.address.startswith("127.0.0.1:") and link.seconds == 0
        assert lags["demo-broker-9"] is None  # no such group registered: unknown
        # The master sees the slave connect from 127.0.0.1: that is the pod with that IP.
        assert match_links({"demo-broker-s1-0": pod("demo-broker-s1-0", ip="127.0.0.1")}, [link]) == {
            "demo-broker-s1-0": link}
    finally:
        if slave is not None:
            await slave.stop()
        await cluster.stop()


async def test_an_unreachable_name_server_leaves_every_lag_unknown():
    async with broker_admin.connect("127.0.0.1:1", 1.0) as admin:
        assert await broker_admin.replication_lags(admin, "demo", ["demo-broker-0"]) == {"demo-broker-0": None}


# ------------------------------------------------------------------ matching links to pods

def test_links_are_matched_to_slave_pods_by_ip():
    a, b = SlaveLag("10.0.1.5:40001", 4096, 2.5), SlaveLag("10.0.1.7:40002", 0, 0.0)
    pods = {"demo-broker-s1-0": pod("demo-broker-s1-0", ip="10.0.1.7"),
            "demo-broker-s2-0": pod("demo-broker-s2-0", "broker-s2", ip="10.0.1.5")}
    assert match_links(pods, [a, b]) == {"demo-broker-s1-0": b, "demo-broker-s2-0": a}
    assert match_links(pods, [b]) == {"demo-broker-s1-0": b, "demo-broker-s2-0": None}  # s2 not connected
    assert match_links(pods, None) == {"demo-broker-s1-0": None, "demo-broker-s2-0": None}  # master not asked
    v6 = SlaveLag("::ffff:10.0.1.5:40001", 1, 0.1)  # an IPv4 peer on a dual-stack socket
    assert match_links({"demo-broker-s2-0": pods["demo-broker-s2-0"]}, [v6]) == {"demo-broker-s2-0": v6}


def test_the_one_link_of_a_one_slave_group_is_its_slave_even_behind_a_proxy():
    proxied = SlaveLag("127.0.0.6:40001", 10, 0.5)  # e.g. a sidecar: not the pod's IP
    assert match_links({"demo-broker-s1-0": pod("demo-broker-s1-0", ip="10.0.1.7")}, [proxied]) == {
        "demo-broker-s1-0": proxied}
    # ... but not with two links (which one?) nor for a slave pod that does not exist
    other = SlaveLag("127.0.0.7:40002", 0, 0.0)
    assert match_links({"demo-broker-s1-0": pod("demo-broker-s1-0", ip="10.0.1.7")}, [proxied, other]) == {
        "demo-broker-s1-0": None}
    assert match_links({"demo-broker-s1-0": None}, [proxied]) == {"demo-broker-s1-0": None}


# ------------------------------------------------------------------ status

def test_status_shows_each_slaves_lag_and_whether_its_group_is_in_sync():
    c = BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "ns"},
                                     "spec": {"replicas": 2, "replication": {"slavesPerGroup": 1,
                                                                             "maxRestartLagBytes": "1Ki"}}}, "img")
    n = c.names
    assert c.replication.max_restart_lag_bytes == 1024
    pods = [pod("demo-broker-0", "broker", ip="10.0.1.1"), pod("demo-broker-s1-0", ip="10.0.1.2"),
            pod("demo-broker-1", "broker", ip="10.0.1.3"), pod("demo-broker-s1-1", ip="10.0.1.4")]
    def seen(links0, links1):  # what the brokers of each group answer (the masters with their links)
        return {"demo-broker-0": [ObservedBroker("10.0.1.1:10911", 0, True, "ASYNC_MASTER", slaves=links0),
                                  ObservedBroker("10.0.1.2:10911", 1, True, "SLAVE")],
                "demo-broker-1": None if links1 is None else [
                    ObservedBroker("10.0.1.3:10911", 0, True, "ASYNC_MASTER", slaves=links1)]}

    def groups(observed):
        roles = all_group_roles(2, 1, n.broker_pod, n.slave_pod, pods, observed, failover=False)
        return status.replication_groups("Async", 1, roles, pods, 1024, failover=False)

    got = groups(seen([SlaveLag("10.0.1.2:5000", 4096, 3.25)], None))
    g0, g1 = got["groups"]
    assert g0["slaves"] == [{"pod": "demo-broker-s1-0", "brokerId": 1, "ready": True, "lagBytes": 4096,
                             "lagSeconds": 3.25}]
    assert g0["inSync"] is False and g0["rolesObserved"] is True  # 4096 bytes behind, 1024 allowed
    assert g1["slaves"] == [{"pod": "demo-broker-s1-1", "brokerId": 1, "ready": True}]  # master not asked: unknown
    assert g1["inSync"] is False and g1["rolesObserved"] is False
    got = groups(seen([SlaveLag("10.0.1.2:5000", 512, 0.25)], [SlaveLag("10.0.1.4:5001", 0, 0.0)]))
    assert [g["inSync"] for g in got["groups"]] == [True, True]
    assert got["groups"][1]["slaves"][0]["lagBytes"] == 0


# ------------------------------------------------------------------ the restart gate

MASTERS = ["demo-broker-0", "demo-broker-1"]
SLAVES = ["demo-broker-s1-0", "demo-broker-s1-1"]


def stale_masters_current_slaves():
    return ([pod(m, "broker", "old") for m in MASTERS], [pod(s) for s in SLAVES])


def test_a_master_restarts_only_once_its_slaves_caught_up():
    masters, slaves = stale_masters_current_slaves()
    level = {"demo-broker-0": {}, "demo-broker-1": {}}
    assert rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, level, 1024).delete_next == "demo-broker-1"

    # demo-broker-1's slave is behind: the other master, whose slave is level, goes first
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1,
                                           {"demo-broker-0": {}, "demo-broker-1": {"demo-broker-s1-1": 5000}}, 1024)
    assert plan.delete_next == "demo-broker-0" and not plan.lag_blocked

    # both behind: nothing is restarted, and the reason says which slave is how far behind
    behind = {"demo-broker-0": {"demo-broker-s1-0": None}, "demo-broker-1": {"demo-broker-s1-1": 5000}}
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, behind, 1024)
    assert plan.delete_next is None and plan.lag_blocked == "SlaveBehind"
    assert plan.waiting_reason == ("restart of master demo-broker-1 waits for its slaves to catch up to within "
                                   "1024 bytes: demo-broker-s1-1 is 5000 bytes behind")
    cond = status.master_restart_condition(plan)
    assert (cond.type, cond.status, cond.reason) == ("MasterRestartBlocked", True, "SlaveBehind")
    assert "demo-broker-s1-1 is 5000 bytes behind" in cond.message

    # a slave whose lag nobody knows (not connected, master not answering) holds its master too
    plan = rollout.plan_replicated_restart(masters[:1] + [pod("demo-broker-1", "broker", "new")], slaves, "new", 2, 1,
                                           behind, 1024)
    assert plan.delete_next is None and plan.lag_blocked == "SlaveLagUnknown"
    assert "the lag of demo-broker-s1-0 is unknown" in plan.waiting_reason

    # caught up: the restart goes on, the condition clears
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, level, 1024)
    cond = status.master_restart_condition(plan)
    assert plan.delete_next == "demo-broker-1" and (cond.status, cond.reason) == (False, "NotBlocked")


def test_slaves_are_restarted_whatever_their_lag():
    masters = [pod(m, "broker", "old") for m in MASTERS]
    slaves = [pod("demo-broker-s1-0", hash_="old"), pod("demo-broker-s1-1")]
    behind = {"demo-broker-0": {"demo-broker-s1-0": None}, "demo-broker-1": {"demo-broker-s1-1": 5000}}
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, behind, 1024)
    assert plan.delete_next == "demo-broker-s1-0" and not plan.lag_blocked


def test_group_lag_counts_only_slaves_beyond_the_threshold_or_unknown():
    g = GroupLag("demo-broker-0", {"a": SlaveLag("x:1", 1024, 1.0), "b": SlaveLag("x:2", 1025, 1.0), "c": None})
    assert g.behind(1024) == {"b": 1025, "c": None} and not g.in_sync(1024)
    assert GroupLag("demo-broker-0", {"a": SlaveLag("x:1", 0, 0.0)}).in_sync(0)


def test_with_failover_a_slave_outside_the_in_sync_set_holds_its_master_however_close():
    """Level in bytes but not yet taken back into the controller's in-sync set (a restarted slave
    rejoins it only after it caught up): restarting the master then would leave nobody the
    controller may promote, so writes would stop until the master is back."""
    rejoining = GroupLag("demo-broker-0", {"demo-broker-s1-0": SlaveLag("x:1", 0, 0.0, in_sync=False)})
    assert rejoining.behind(1024) == {"demo-broker-s1-0": 0} and not rejoining.in_sync(1024)
    assert GroupLag("demo-broker-0", {"demo-broker-s1-0": SlaveLag("x:1", 0, 0.0, in_sync=True)}).in_sync(1024)
    masters = [pod("demo-broker-0", "broker", "old")]
    plan = rollout.plan_replicated_restart(masters, [pod("demo-broker-s1-0")], "new", 1, 1,
                                           {"demo-broker-0": rejoining.behind(1024)}, 1024)
    assert plan.delete_next is None and plan.lag_blocked == "SlaveBehind"
    assert plan.waiting_reason.endswith("demo-broker-s1-0 is not in the controller's in-sync set yet")


def test_the_master_reports_whether_each_slave_link_is_in_sync():
    info = {"ferrymqHaSlaves": '[{"address":"10.0.0.2:4711","ackedOffset":10,"lagBytes":0,"lagSeconds":0.0,'
                               '"inSync":false},{"address":"10.0.0.3:4711","ackedOffset":10,"lagBytes":0}]'}
    assert [s.in_sync for s in broker_admin.slave_lags_of(info, "m:10911")] == [False, None]


def test_a_master_is_drained_before_its_restart_only_when_another_group_takes_its_writes():
    serving = {"demo-broker-0": "demo-broker-0", "demo-broker-s1-1": "demo-broker-1"}
    assert rollout.drain_seconds("demo-broker-0", serving, groups=2, configured=35.0) == 35.0
    assert rollout.drain_seconds("demo-broker-s1-1", serving, groups=2, configured=35.0) == 35.0  # promoted master
    assert rollout.drain_seconds("demo-broker-s1-0", serving, groups=2, configured=35.0) == 0  # a slave
    assert rollout.drain_seconds("demo-broker-0", serving, groups=1, configured=35.0) == 0  # the only group


def test_the_default_threshold_is_one_mebibyte():
    c = BrokerCluster.from_resource({"metadata": {"name": "demo"}, "spec": {"replication": {"slavesPerGroup": 1}}}, "i")
    assert c.replication.max_restart_lag_bytes == 1024 * 1024

