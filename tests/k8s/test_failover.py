"""spec.replication.failover on a real API server: the operator runs two failover controllers
(StatefulSet without claims, headless Service, ServiceAccount, Role, RoleBinding, PDB and the
state ConfigMap, owned by the Broker) and points the brokers at both; an old single controller
with a claim is replaced; turning failover off retires it; the API server refuses failover without a slave to
promote and the controller keys in spec.config. (Promotion itself is a broker and controller
matter, tested with real processes in tests/integration/test_failover.py: kwok pods run nothing.)"""

from __future__ import annotations

import json

import pytest

from tests.k8s.conftest import CLUSTER
from tests.k8s.test_operator import broker_cr, wait_status
from testkit.wait import poll_until


def test_failover_runs_two_controllers_the_brokers_are_pointed_at(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=1, replication={"slavesPerGroup": 1, "mode": "Sync", "failover": True,
                                                "failoverTimeoutSeconds": 5}), ns)
    sts = poll_until("the controller StatefulSet", lambda: cp.get("statefulset", f"{CLUSTER}-controller", ns), 120)
    broker = cp.get("broker", CLUSTER, ns)
    uid = broker["metadata"]["uid"]
    assert sts["metadata"]["ownerReferences"][0]["uid"] == uid
    assert sts["spec"]["replicas"] == 2 and not sts["spec"].get("volumeClaimTemplates")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--failover-timeout") + 1] == "5000"
    assert args[args.index("--state") + 1] == "kubernetes"
    assert cp.get("service", f"{CLUSTER}-controller", ns)["spec"]["clusterIP"] == "None"
    # their RBAC (created by the operator under the chart's RBAC), PDB and the empty state ConfigMap
    for kind in ("serviceaccount", "role", "rolebinding", "poddisruptionbudget"):
        obj = poll_until(f"{kind} {CLUSTER}-controller", lambda: cp.get(kind, f"{CLUSTER}-controller", ns), 60)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    state = poll_until("the state ConfigMap", lambda: cp.get("configmap", f"{CLUSTER}-controller-state", ns), 60)
    assert state["metadata"]["ownerReferences"][0]["uid"] == uid
    can = cp.kubectl("auth", "can-i", "update", "configmaps", "-n", ns,
                     f"--as=system:serviceaccount:{ns}:{CLUSTER}-controller", check=False).stdout.strip()
    assert can == "yes"
    can = cp.kubectl("auth", "can-i", "update", "leases.coordination.k8s.io", "-n", ns,
                     f"--as=system:serviceaccount:{ns}:{CLUSTER}-controller", check=False).stdout.strip()
    assert can == "yes"
    # two pods on two of the three nodes, no claim
    pods = poll_until("two controller pods scheduled", lambda: (lambda ps: ps if len(ps) == 2 and all(
        p["spec"].get("nodeName") for p in ps) else None)([p for p in cp.get("pods", None, ns)["items"]
                                                          if p["metadata"]["name"].startswith(f"{CLUSTER}-controller-")]), 60)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    assert not [p for p in cp.get("pvc", None, ns)["items"] if "controller" in p["metadata"]["name"]]
    conf = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    assert "enableControllerMode=true" in conf
    assert (f"controllerAddr={CLUSTER}-controller-0.{CLUSTER}-controller.{ns}.svc:9878;"
            f"{CLUSTER}-controller-1.{CLUSTER}-controller.{ns}.svc:9878") in conf
    slave_args = cp.get("statefulset", f"{CLUSTER}-broker-s1", ns)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "brokerRole=SLAVE" not in slave_args and "brokerId=1" in slave_args
    # the group's master and slave on different nodes, and one PDB for the group
    group = poll_until("the group's pods scheduled", lambda: (lambda ps: ps if len(ps) == 2 and all(
        p["spec"].get("nodeName") for p in ps) else None)([p for p in cp.get("pods", None, ns)["items"]
                                                          if p["metadata"]["name"] in (f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-s1-0")]), 60)
    assert len({p["spec"]["nodeName"] for p in group}) == 2
    pdbs = poll_until("the group PDB alone", lambda: (lambda names: names if f"{CLUSTER}-broker" not in names else None)(
        {p["metadata"]["name"] for p in cp.get("pdb", None, ns)["items"]}), 60)
    assert {f"{CLUSTER}-broker-group-0", f"{CLUSTER}-namesrv", f"{CLUSTER}-controller"} <= pdbs
    assert f"{CLUSTER}-broker-s1" not in pdbs
    assert cp.get("pdb", f"{CLUSTER}-broker-group-0", ns)["status"].get("expectedPods") == 2

    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"replication":{"failover":false}}}')
    poll_until("the controller retired", lambda: cp.get("statefulset", f"{CLUSTER}-controller", ns) is None, 120)
    for kind in ("service", "serviceaccount", "role", "rolebinding"):
        poll_until(f"{kind} retired", lambda: cp.get(kind, f"{CLUSTER}-controller", ns) is None, 30)
    poll_until("its PDB retired", lambda: cp.get("pdb", f"{CLUSTER}-controller", ns) is None, 30)
    assert "enableControllerMode" not in cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]


def test_a_single_controller_with_a_claim_becomes_two_without(control_plane, operator_logs, namespace):
    """An operator upgrade: the Broker's failover controller was one pod with a claim; its
    StatefulSet cannot be patched into the new one (claim templates and pod management are
    immutable): the operator deletes it with its pod first, then creates the new one. The
    old claim stays."""
    cp, ns = control_plane, namespace
    labels = {"app.kubernetes.io/name": "ferrymq", "app.kubernetes.io/instance": CLUSTER,
              "app.kubernetes.io/component": "controller"}
    old = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": f"{CLUSTER}-controller", "labels": labels},
           "spec": {"replicas": 1, "serviceName": f"{CLUSTER}-controller", "podManagementPolicy": "OrderedReady",
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                        {"name": "controller", "image": "ferrymq/broker:old", "args": ["controller", "--data-dir", "/data"],
                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}
    cp.apply(old, ns)
    poll_until("the old controller's claim", lambda: f"data-{CLUSTER}-controller-0" in
               {p["metadata"]["name"] for p in cp.get("pvc", None, ns)["items"]}, 60)
    old_uid = cp.get("statefulset", f"{CLUSTER}-controller", ns)["metadata"]["uid"]
    cp.apply(broker_cr(replicas=1, replication={"slavesPerGroup": 1, "failover": True}), ns)
    sts = poll_until("the controller StatefulSet replaced", lambda: (lambda o: o if o and o["metadata"]["uid"] != old_uid
                                                                     else None)(cp.get("statefulset", f"{CLUSTER}-controller", ns)), 120)
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["podManagementPolicy"] == "Parallel"
    assert not sts["spec"].get("volumeClaimTemplates")
    pods = poll_until("the new controller pods", lambda: (lambda ps: ps if len(ps) == 2 else None)(
        [p for p in cp.get("pods", None, ns)["items"] if p["metadata"]["name"].startswith(f"{CLUSTER}-controller-")]), 60)
    assert all("--state" in p["spec"]["containers"][0]["args"] for p in pods)
    assert f"data-{CLUSTER}-controller-0" in {p["metadata"]["name"] for p in cp.get("pvc", None, ns)["items"]}
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("observedGeneration") == 1, "observed")
    assert "cannot change in place" in operator_logs.log_text()
    assert broker["status"]["phase"] != "InvalidConfig"


@pytest.mark.parametrize("spec,message", [
    ({"replication": {"failover": True}}, "failover needs slavesPerGroup >= 1"),
    ({"replication": {"slavesPerGroup": 1, "failover": True, "failoverTimeoutSeconds": 0}},
     "should be greater than or equal to 1"),
    ({"config": {"controllerAddr": "elsewhere:9878"}}, "follow from spec.replication.failover"),
])
def test_invalid_failover_is_rejected_by_the_api_server(control_plane, helm_release, namespace, spec, message):
    done = control_plane.kubectl("apply", "-n", namespace, "-f", "-", check=False,
                                 input=json.dumps(broker_cr(**spec)))
    assert done.returncode != 0 and message in done.stderr, done.stderr
