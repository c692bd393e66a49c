"""spec.replication as the operator builds it: master and slave StatefulSets, their identities,
spread and services; slaves restarted before masters; status per broker group."""

from __future__ import annotations

import pytest

from ferrymq_operator import manifests, replication_roles, rollout, status
from ferrymq_operator.constants import ANN_CONFIG_HASH, LABEL_COMPONENT
from ferrymq_operator.model import BrokerCluster


def cluster(replicas=2, **replication) -> BrokerCluster:
    spec = {"replicas": replicas}
    if replication:
        spec["replication"] = replication
    return BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod", "uid": "u1"}, "spec": spec})


def by_kind_name(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def args_of(sts):
    return sts["spec"]["template"]["spec"]["containers"][0]["args"]


def test_one_slave_per_group_adds_a_slave_set_with_its_own_service_pdb_and_claims():
    c = cluster(slavesPerGroup=1, mode="Sync")
    objs = by_kind_name(manifests.all_objects(c))
    master, slave = objs[("StatefulSet", "demo-broker")], objs[("StatefulSet", "demo-broker-s1")]
    assert ("Service", "demo-broker-s1-headless") in objs
    # one PDB per group (its master and slave), none per set: a pod under two PDBs cannot be evicted
    assert ("PodDisruptionBudget", "demo-broker-s1") not in objs and ("PodDisruptionBudget", "demo-broker") not in objs
    assert {("PodDisruptionBudget", "demo-broker-group-0"), ("PodDisruptionBudget", "demo-broker-group-1")} <= set(objs)
    assert ("StatefulSet", "demo-broker-s2") not in objs
    assert slave["spec"]["replicas"] == master["spec"]["replicas"] == 2
    assert slave["spec"]["serviceName"] == "demo-broker-s1-headless"
    assert slave["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    # the selectors of the sets never overlap (a StatefulSet must own only its pods)
    assert master["spec"]["selector"]["matchLabels"][LABEL_COMPONENT] == "broker"
    assert slave["spec"]["selector"]["matchLabels"][LABEL_COMPONENT] == "broker-s1"
    conf = objs[("ConfigMap", "demo-config")]["data"]["broker.conf"]
    assert "brokerRole=SYNC_MASTER\n" in conf and "haListenPort=10912\n" in conf


def test_a_slave_pod_is_broker_id_k_of_the_group_named_by_its_ordinal():
    c = cluster(slavesPerGroup=2)
    slave = manifests.slave_statefulset(c, 2)
    args = args_of(slave)
    assert {"brokerName=demo-broker-$(POD_INDEX)", "brokerId=2", "brokerRole=SLAVE",
            "brokerIP1=$(POD_NAME).demo-broker-s2-headless.$(POD_NAMESPACE).svc",
            "haMasterAddress=demo-broker-$(POD_INDEX).demo-broker-headless.$(POD_NAMESPACE).svc:10912"} <= set(args)
    env = {e["name"]: e for e in slave["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert "brokerName=$(POD_NAME)" in args_of(manifests.broker_statefulset(c))
    conf = manifests.config_map(c)["data"]["broker.conf"]
    assert "brokerRole=ASYNC_MASTER\n" in conf


def test_a_groups_pods_prefer_different_nodes_and_zones():
    c = cluster(slavesPerGroup=1)
    for sts in (manifests.broker_statefulset(c), manifests.slave_statefulset(c, 1)):
        terms = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        term = terms[0]["podAffinityTerm"]
        assert term["matchLabelKeys"] == ["apps.kubernetes.io/pod-index"]  # same group = same ordinal
        assert {"broker", "broker-s1"} <= set(term["labelSelector"]["matchExpressions"][0]["values"])
        ports = {p["name"]: p["containerPort"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert ports["ha"] == 10912


def test_without_replication_the_master_template_is_unchanged():
    """Upgrading the operator must not restart brokers that do not ask for replication."""
    c = cluster()
    pod = manifests.broker_statefulset(c)["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert [p["name"] for p in pod["containers"][0]["ports"]] == ["broker", "http"]
    assert [e["name"] for e in pod["containers"][0]["env"]] == ["POD_NAME", "POD_NAMESPACE"]
    assert "brokerRole" not in manifests.config_map(c)["data"]["broker.conf"]
    assert not [o for o in manifests.all_objects(c) if "-s1" in o["metadata"]["name"]]


def test_lowering_slaves_per_group_retires_the_extra_sets():
    assert manifests.retired_slave_objects(cluster(slavesPerGroup=2)) == []
    retired = manifests.retired_slave_objects(cluster(slavesPerGroup=1))
    assert ("apps/v1", "StatefulSet", "demo-broker-s2") in retired and ("v1", "Service", "demo-broker-s2-headless") in retired
    assert len(manifests.retired_slave_objects(cluster())) == 4


@pytest.mark.parametrize("key", ["brokerRole", "brokerId", "haListenPort"])
def test_replication_keys_are_not_set_through_spec_config(key):
    from pathlib import Path

    import yaml
    crd = yaml.safe_load(Path("crds/ferrymq.io_brokers.yaml").read_text())
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"][
        "x-kubernetes-validations"]
    assert any(f"'{key}' in self" in r["rule"] for r in rules)


def pod(name, component, hash_, ready=True):
    return {"metadata": {"name": name, "labels": {LABEL_COMPONENT: component}, "annotations": {ANN_CONFIG_HASH: hash_}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


LEVEL = {"demo-broker-0": {}, "demo-broker-1": {}}  # every slave caught up (test_replication_lag.py: when not)


def test_slaves_restart_before_masters_and_masters_only_when_every_slave_is_back():
    masters = [pod("demo-broker-0", "broker", "old"), pod("demo-broker-1", "broker", "old")]
    slaves = [pod("demo-broker-s1-0", "broker-s1", "old"), pod("demo-broker-s1-1", "broker-s1", "new")]
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, LEVEL, 0)
    assert plan.delete_next == "demo-broker-s1-0" and rollout.is_slave_pod(slaves[0])
    slaves[0] = pod("demo-broker-s1-0", "broker-s1", "new", ready=False)  # restarted, not Ready yet
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, LEVEL, 0)
    assert plan.delete_next is None and "demo-broker-s1-0" in plan.waiting_reason
    slaves[0] = pod("demo-broker-s1-0", "broker-s1", "new")
    plan = rollout.plan_replicated_restart(masters, slaves, "new", 2, 1, LEVEL, 0)
    assert plan.delete_next == "demo-broker-1" and not rollout.is_slave_pod(masters[1])
    assert rollout.plan_replicated_restart(masters, slaves[:1], "new", 2, 1, LEVEL, 0).delete_next is None  # a slave missing


def test_status_lists_each_groups_master_and_slaves():
    c = cluster(slavesPerGroup=1)
    n = c.names
    pods = [pod("demo-broker-0", "broker", "h"), pod("demo-broker-s1-0", "broker-s1", "h", ready=False),
            pod("demo-broker-1", "broker", "h")]
    roles = replication_roles.all_group_roles(2, 1, n.broker_pod, n.slave_pod, pods, {}, failover=False)
    got = status.replication_groups("Async", 1, roles, pods, 0, failover=False)
    assert got["mode"] == "Async" and got["slavesPerGroup"] == 1
    # no broker asked: the static layout, flagged as not observed
    assert got["groups"][0] == {"brokerName": "demo-broker-0", "master": {"pod": "demo-broker-0", "brokerId": 0, "ready": True},
                                "slaves": [{"pod": "demo-broker-s1-0", "brokerId": 1, "ready": False}], "slavesReady": 0,
                                "rolesObserved": False, "inSync": False}
    assert got["groups"][1]["slaves"] == [{"pod": "demo-broker-s1-1", "brokerId": 1, "ready": False}]  # not created yet
    cond, phase = status.broker_readiness(1, 2, 2, 1, False, False, slaves=2, slaves_ready=1)
    assert not cond.status and "1/2 slaves" in cond.message


def test_a_groups_pods_spread_over_nodes_preferred_by_default():
    c = cluster(slavesPerGroup=1)
    for sts in (manifests.broker_statefulset(c), manifests.slave_statefulset(c, 1)):
        pod = sts["spec"]["template"]["spec"]
        (group,) = pod["topologySpreadConstraints"]  # the API keys them by (topologyKey, whenUnsatisfiable)
        assert group["topologyKey"] == "kubernetes.io/hostname"
        assert group["maxSkew"] == 1 and group["whenUnsatisfiable"] == "ScheduleAnyway"
        assert group["matchLabelKeys"] == ["apps.kubernetes.io/pod-index"]
        assert set(group["labelSelector"]["matchExpressions"][0]["values"]) == {"broker", "broker-s1", "broker-s2"}
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]


def test_required_spread_refuses_to_schedule_two_pods_of_a_group_on_one_node():
    c = cluster(slavesPerGroup=1, spreadAcrossNodes="Required")
    assert c.replication.spread_required
    pod = manifests.slave_statefulset(c, 1)["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]
    (node,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert node["topologyKey"] == "kubernetes.io/hostname" and node["matchLabelKeys"] == ["apps.kubernetes.io/pod-index"]
    # zones stay a preference: a single-zone cluster is common
    assert [t["podAffinityTerm"]["topologyKey"] for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]] == [
        "topology.kubernetes.io/zone"]
    (group,) = pod["topologySpreadConstraints"]
    assert group["whenUnsatisfiable"] == "DoNotSchedule"


def test_group_pdbs_cover_a_groups_master_and_slaves_and_follow_the_group_count():
    c = cluster(slavesPerGroup=2)
    pdbs = {p["metadata"]["name"]: p for p in manifests.disruption_budgets(c)}
    assert set(pdbs) == {"demo-namesrv", "demo-broker-group-0", "demo-broker-group-1"}
    group = pdbs["demo-broker-group-1"]
    assert group["spec"]["maxUnavailable"] == 1
    sel = group["spec"]["selector"]
    assert sel["matchLabels"]["apps.kubernetes.io/pod-index"] == "1"
    assert sel["matchLabels"]["app.kubernetes.io/instance"] == "demo"
    assert sel["matchExpressions"] == [{"key": "app.kubernetes.io/component", "operator": "In",
                                        "values": ["broker", "broker-s1", "broker-s2"]}]
    # while a scale-down waits, the leaving groups keep theirs
    assert "demo-broker-group-2" in {p["metadata"]["name"] for p in manifests.disruption_budgets(c, broker_replicas=3)}
    # stale: the per-set PDBs replication replaced, and groups gone by a scale-down
    existing = ["demo-namesrv", "demo-broker", "demo-broker-s1", "demo-broker-group-0", "demo-broker-group-1",
                "demo-broker-group-2"]
    assert manifests.stale_disruption_budgets(c, existing) == ["demo-broker", "demo-broker-group-2", "demo-broker-s1"]
    # replication off again: back to the one PDB over the masters
    assert manifests.stale_disruption_budgets(cluster(), existing) == [
        "demo-broker-group-0", "demo-broker-group-1", "demo-broker-group-2", "demo-broker-s1"]
