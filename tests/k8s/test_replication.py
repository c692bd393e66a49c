"""spec.replication on a real API server: master and slave StatefulSets with their own claims,
status per broker group, a config change restarting slaves before masters (real slave
processes replicate for the fake slave pods: a master restarts only once its slave is in
sync) and fewer slaves retiring a set (failover: test_failover.py)."""

from __future__ import annotations

import json

import pytest

from tests.k8s.conftest import CLUSTER
from tests.k8s.test_operator import broker_cr, condition, wait_status
from testkit.wait import poll_until

COMPONENT = "app.kubernetes.io/component"


def broker_pods(cp, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in cp.get("pods", None, ns)["items"]
            if p["metadata"]["labels"].get(COMPONENT, "").startswith("broker")}


def ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_slaves_per_group_runs_a_slave_set_and_reports_each_group(control_plane, operator_logs, namespace, ferry_slaves):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=2, replication={"slavesPerGroup": 1, "mode": "Sync"}), ns)
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready"
                         and all(g["slavesReady"] == 1 for g in (o["status"].get("replication") or {}).get("groups", [{}])),
                         "Ready with its slaves", 180)
    groups = broker["status"]["replication"]["groups"]
    assert [g["brokerName"] for g in groups] == [f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"]
    assert groups[1]["master"] == {"pod": f"{CLUSTER}-broker-1", "brokerId": 0, "ready": True}
    (slave,) = groups[1]["slaves"]
    assert {k: slave[k] for k in ("pod", "brokerId", "ready")} == {"pod": f"{CLUSTER}-broker-s1-1", "brokerId": 1,
                                                                   "ready": True}
    # the real slave standing in for the pod replicates: its master reports it level
    assert slave.get("lagBytes") == 0 and groups[1]["inSync"] is True
    assert "2/2 slaves" in condition(broker, "Ready")["message"]
    slave_sts = cp.get("statefulset", f"{CLUSTER}-broker-s1", ns)
    assert slave_sts["metadata"]["ownerReferences"][0]["uid"] == broker["metadata"]["uid"]
    assert cp.get("service", f"{CLUSTER}-broker-s1-headless", ns) is not None
    pvcs = sorted(p["metadata"]["name"] for p in cp.get("pvc", None, ns)["items"])
    assert pvcs == sorted(f"data-{CLUSTER}-{s}-{i}" for s in ("broker", "broker-s1") for i in (0, 1))
    # the slave pods got their group's index from Kubernetes (what POD_INDEX reads)
    pod = broker_pods(cp, ns)[f"{CLUSTER}-broker-s1-1"]
    assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    conf = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    assert "brokerRole=SYNC_MASTER" in conf

    # A config change restarts every broker pod, the slaves before any master.
    before = {n: p["metadata"]["uid"] for n, p in broker_pods(cp, ns).items()}
    order: list[str] = []

    def restarted():
        pods = broker_pods(cp, ns)
        for name, p in pods.items():
            if p["metadata"]["uid"] != before.get(name) and name not in order:
                order.append(name)
        return len(order) == 4 and all(ready(p) for p in pods.values()) and len(pods) == 4
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"config":{"flushDiskType":"SYNC_FLUSH"}}}')
    poll_until("every broker pod restarted", restarted, 240, interval=0.2)
    assert all("-s1-" in n for n in order[:2]) and not any("-s1-" in n for n in order[2:]), order

    # Fewer slaves: the slave set goes, its claims stay (as on any scale-down).
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"replication":{"slavesPerGroup":0}}}')
    poll_until("slave set removed", lambda: cp.get("statefulset", f"{CLUSTER}-broker-s1", ns) is None, 120)
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: "replication" not in o["status"]
                         and o["status"]["observedGeneration"] == o["metadata"]["generation"], "without replication")
    assert f"data-{CLUSTER}-broker-s1-0" in {p["metadata"]["name"] for p in cp.get("pvc", None, ns)["items"]}


@pytest.mark.parametrize("replication,message", [
    ({"slavesPerGroup": 3}, "should be less than or equal to 2"),
    ({"slavesPerGroup": 1, "mode": "Semi"}, "Unsupported value"),
])
def test_invalid_replication_is_rejected_by_the_api_server(control_plane, helm_release, namespace, replication, message):
    done = control_plane.kubectl("apply", "-n", namespace, "-f", "-", check=False,
                                 input=json.dumps(broker_cr(replication=replication)))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_replication_keys_in_spec_config_are_rejected(control_plane, helm_release, namespace):
    done = control_plane.kubectl("apply", "-n", namespace, "-f", "-", check=False,
                                 input=json.dumps(broker_cr(config={"brokerRole": "SLAVE"})))
    assert done.returncode != 0 and "follow from spec.replication" in done.stderr, done.stderr
