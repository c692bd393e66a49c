"""The operator follows the master a group actually has: after a failover the pod
``demo-broker-s1-0`` serves as master and ``demo-broker-0`` follows it. status.replication
names the promoted pod as master (with the id it registered under, the epoch, the change),
and a rolling restart takes the actual slaves first - the old master's pod among them - and
the actual master last, gated on its slaves' lag. When no broker of a group answers as master
the status falls back to the static layout and says so, and with failover no pod that may be
the master is restarted (RolesUnknown)."""

from __future__ import annotations

from ferrymq_operator import rollout, status
from ferrymq_operator.broker_admin import ObservedBroker, SlaveLag
from ferrymq_operator.constants import ANN_CONFIG_HASH, LABEL_COMPONENT
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.replication_roles import all_group_roles, master_changes, serving_masters, split_pods

N = BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "ns"},
                                 "spec": {"replicas": 2, "replication": {"slavesPerGroup": 1, "failover": True}}},
                                "img").names
IPS = {"demo-broker-0": "10.0.1.1", "demo-broker-s1-0": "10.0.1.2", "demo-broker-1": "10.0.1.3",
       "demo-broker-s1-1": "10.0.1.4"}


def pod(name: str, hash_: str = "new", ready: bool = True) -> dict:
    component = "broker" if "-s1-" not in name else "broker-s1"
    return {"metadata": {"name": name, "labels": {LABEL_COMPONENT: component}, "annotations": {ANN_CONFIG_HASH: hash_}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "podIP": IPS[name], "podIPs": [{"ip": IPS[name]}]}}


def failed_over(lag_bytes: int = 0) -> dict:
    """Group 0 after a failover: the -s1-0 pod's broker (identity 1) is master at epoch 2,
    registered as brokerId 0; the old master's pod follows it as brokerId 1. Group 1 as laid out."""
    return {
        "demo-broker-0": [
            ObservedBroker("10.0.1.2:10911", 0, True, "SYNC_MASTER", identity=1, epoch=2,
                           slaves=[SlaveLag("10.0.1.1:40312", lag_bytes, 0.5 if lag_bytes else 0.0)]),
            ObservedBroker("10.0.1.1:10911", 1, True, "SLAVE", identity=0, epoch=2)],
        "demo-broker-1": [
            ObservedBroker("10.0.1.3:10911", 0, True, "SYNC_MASTER", identity=0, epoch=1,
                           slaves=[SlaveLag("10.0.1.4:40001", 0, 0.0)]),
            ObservedBroker("10.0.1.4:10911", 1, True, "SLAVE", identity=1, epoch=1)]}


def roles_of(pods, observed, failover=True):
    return all_group_roles(2, 1, N.broker_pod, N.slave_pod, pods, observed, failover)


ALL = ["demo-broker-0", "demo-broker-s1-0", "demo-broker-1", "demo-broker-s1-1"]


# ------------------------------------------------------------------ status

def test_after_a_failover_the_status_names_the_promoted_pod_as_master():
    pods = [pod(n) for n in ALL]
    got = status.replication_groups("Sync", 1, roles_of(pods, failed_over(lag_bytes=4096)), pods, 1024, True)
    g0, g1 = got["groups"]
    assert g0["brokerName"] == "demo-broker-0"
    assert g0["master"] == {"pod": "demo-broker-s1-0", "brokerId": 0, "ready": True}
    assert g0["slaves"] == [{"pod": "demo-broker-0", "brokerId": 1, "ready": True, "lagBytes": 4096, "lagSeconds": 0.5}]
    assert g0["rolesObserved"] is True and g0["epoch"] == 2 and g0["inSync"] is False
    assert g0["lastObservedMaster"] == "demo-broker-s1-0"
    assert g1["master"]["pod"] == "demo-broker-1" and g1["inSync"] is True and g1["epoch"] == 1


def test_brokers_that_do_not_report_their_identity_are_matched_to_pods_by_ip():
    observed = {name: [ObservedBroker(b.address, b.broker_id, b.reachable, b.role, None, b.epoch, b.slaves)
                       for b in brokers] for name, brokers in failed_over().items()}
    pods = [pod(n) for n in ALL]
    g0 = roles_of(pods, observed)[0]
    assert (g0.master, g0.slaves, g0.observed) == ("demo-broker-s1-0", ["demo-broker-0"], True)
    assert g0.broker_ids == {"demo-broker-s1-0": 0, "demo-broker-0": 1}
    # with failover, an address matching no pod IP is not guessed from the id it registered under
    lost = {"demo-broker-0": [ObservedBroker("172.16.0.9:10911", 0, True, "SYNC_MASTER", epoch=2)]}
    assert roles_of(pods, lost)[0].observed is False


def test_of_two_brokers_claiming_master_the_one_of_the_newer_epoch_is_it():
    stale_claim = {"demo-broker-0": [
        ObservedBroker("10.0.1.1:10911", 0, True, "SYNC_MASTER", identity=0, epoch=1),  # cut off, not yet told
        ObservedBroker("10.0.1.2:10911", 0, True, "SYNC_MASTER", identity=1, epoch=2)]}
    pods = [pod(n) for n in ALL]
    assert roles_of(pods, stale_claim)[0].master == "demo-broker-s1-0"
    same_epoch = {"demo-broker-0": [ObservedBroker("10.0.1.1:10911", 0, True, "SYNC_MASTER", identity=0, epoch=2),
                                    ObservedBroker("10.0.1.2:10911", 0, True, "SYNC_MASTER", identity=1, epoch=2)]}
    assert roles_of(pods, same_epoch)[0].observed is False  # not trusted either way


def test_nobody_reachable_falls_back_to_the_static_layout_and_says_so():
    pods = [pod(n) for n in ALL]
    unreachable = {"demo-broker-0": [ObservedBroker("10.0.1.2:10911", 0, False),
                                     ObservedBroker("10.0.1.1:10911", 1, False)], "demo-broker-1": None}
    got = status.replication_groups("Sync", 1, roles_of(pods, unreachable), pods, 1024, True)
    for g in got["groups"]:
        assert g["rolesObserved"] is False and g["inSync"] is False
        assert "brokerId" not in g["master"]  # not claimed: with failover the static id may be wrong
        assert "lagBytes" not in g["slaves"][0]
    assert got["groups"][0]["master"]["pod"] == "demo-broker-0"
    # without failover roles never move: the static layout is the truth, ids included
    static = status.replication_groups("Async", 1, roles_of(pods, unreachable, failover=False), pods, 1024, False)
    assert static["groups"][0]["master"] == {"pod": "demo-broker-0", "brokerId": 0, "ready": True}
    assert static["groups"][0]["rolesObserved"] is False and "epoch" not in static["groups"][0]


def test_a_master_change_is_recorded_across_a_window_where_roles_were_unknown():
    pods = [pod(n) for n in ALL]
    before = failed_over()
    before["demo-broker-0"] = [ObservedBroker("10.0.1.1:10911", 0, True, "SYNC_MASTER", identity=0, epoch=1,
                                              slaves=[SlaveLag("10.0.1.2:40001", 0, 0.0)]),
                               ObservedBroker("10.0.1.2:10911", 1, True, "SLAVE", identity=1, epoch=1)]
    s1 = status.replication_groups("Sync", 1, roles_of(pods, before), pods, 0, True, None, "t1")
    assert s1["groups"][0]["lastObservedMaster"] == "demo-broker-0" and "lastMasterChange" not in s1["groups"][0]
    # the master is gone; its slave waits for the controller (SLAVE, not connected): nobody is master
    window = {"demo-broker-0": [ObservedBroker("10.0.1.1:10911", 0, False),
                                ObservedBroker("10.0.1.2:10911", 1, True, "SLAVE", identity=1, epoch=1)],
              "demo-broker-1": failed_over()["demo-broker-1"]}
    r2 = roles_of(pods, window)
    s2 = status.replication_groups("Sync", 1, r2, pods, 0, True, s1, "t2")
    assert master_changes(s1, r2) == []
    assert s2["groups"][0]["rolesObserved"] is False and s2["groups"][0]["lastObservedMaster"] == "demo-broker-0"
    # promoted
    r3 = roles_of(pods, failed_over())
    (change,) = master_changes(s2, r3)
    assert (change.broker_name, change.from_pod, change.to_pod, change.epoch) == (
        "demo-broker-0", "demo-broker-0", "demo-broker-s1-0", 2)
    s3 = status.replication_groups("Sync", 1, r3, pods, 0, True, s2, "t3")
    assert s3["groups"][0]["lastMasterChange"] == {"from": "demo-broker-0", "to": "demo-broker-s1-0", "epoch": 2,
                                                   "time": "t3"}
    # nothing moves: no new change, the last one is kept
    assert master_changes(s3, r3) == []
    s4 = status.replication_groups("Sync", 1, r3, pods, 0, True, s3, "t4")
    assert s4["groups"][0]["lastMasterChange"]["time"] == "t3"


# ------------------------------------------------------------------ restart order

def plan(pods, observed, max_lag=1024, failover=True):
    roles = roles_of(pods, observed, failover)
    masters, slaves, undetermined = split_pods(roles, pods)
    return rollout.plan_replicated_restart(masters, slaves, "new", 2, 1,
                                           {g.master: g.behind(max_lag) for g in roles if g.observed}, max_lag,
                                           undetermined)


def test_after_a_failover_the_old_masters_pod_restarts_as_a_slave_and_the_promoted_pod_last():
    pods = {n: pod(n, "old") for n in ALL}
    order = []
    for _ in ALL:
        p = plan(list(pods.values()), failed_over())
        assert p.delete_next is not None, p.waiting_reason
        order.append(p.delete_next)
        pods[p.delete_next] = pod(p.delete_next, "new")  # restarted and Ready again
    # slaves (by the role they serve in) first, highest ordinal first; the promoted pod is a master
    assert order == ["demo-broker-s1-1", "demo-broker-0", "demo-broker-1", "demo-broker-s1-0"]
    assert plan(list(pods.values()), failed_over()).stale == []


def test_the_promoted_master_waits_for_the_old_masters_pod_to_catch_up():
    pods = [pod(n) for n in ALL if n != "demo-broker-s1-0"] + [pod("demo-broker-s1-0", "old")]
    p = plan(pods, failed_over(lag_bytes=5000))
    assert p.delete_next is None and p.lag_blocked == "SlaveBehind"
    assert "restart of master demo-broker-s1-0 waits" in p.waiting_reason
    assert "demo-broker-0 is 5000 bytes behind" in p.waiting_reason
    assert status.master_restart_condition(p).reason == "SlaveBehind"
    assert plan(pods, failed_over(lag_bytes=100)).delete_next == "demo-broker-s1-0"


def test_with_failover_and_roles_unknown_no_pod_that_may_be_master_is_restarted():
    pods = [pod(n, "old") for n in ALL]
    observed = {"demo-broker-0": [ObservedBroker("10.0.1.2:10911", 0, False),
                                  ObservedBroker("10.0.1.1:10911", 1, False)],
                "demo-broker-1": failed_over()["demo-broker-1"]}
    p = plan(pods, observed)
    assert p.delete_next == "demo-broker-s1-1"  # the known group's slave may go
    pods = [pod(n, "new" if n.endswith("-1") else "old") for n in ALL]
    p = plan(pods, observed)
    assert p.delete_next is None and p.lag_blocked == "RolesUnknown"
    assert "demo-broker-0" in p.waiting_reason and "demo-broker-s1-0" in p.waiting_reason
    cond = status.master_restart_condition(p)
    assert cond.status and cond.reason == "RolesUnknown"
    # a pod of the group that answers as a slave is known not to be the master: it may go first
    observed["demo-broker-0"][1] = ObservedBroker("10.0.1.1:10911", 1, True, "SLAVE", identity=0, epoch=2)
    assert plan(pods, observed).delete_next == "demo-broker-0"
    # without failover the static layout holds: slave first, the master waits for its (unknown) lag
    p = plan(pods, {}, failover=False)
    assert p.delete_next == "demo-broker-s1-0"


def test_only_the_pod_serving_as_master_is_drained_and_by_its_groups_brokername():
    pods = [pod(n) for n in ALL]
    # after the failover the promoted pod takes group demo-broker-0's sends; the old master's pod none
    assert serving_masters(roles_of(pods, failed_over())) == {"demo-broker-s1-0": "demo-broker-0",
                                                              "demo-broker-1": "demo-broker-1"}
    assert serving_masters(roles_of(pods, {})) == {}  # failover, nothing observed: no pod is known to be it
    assert serving_masters(roles_of(pods, {}, failover=False)) == {"demo-broker-0": "demo-broker-0",
                                                                   "demo-broker-1": "demo-broker-1"}
