"""Raising a Broker's spec.storage.size on a real API server: the StatefulSet's claim templates
are immutable, so the operator recreates the set around its running pods (Orphan) and expands
the existing claims where the StorageClass allows it; where it does not, the status says so.
Never a failing reconcile loop."""

from __future__ import annotations

import json

from tests.k8s.conftest import CLUSTER
from tests.k8s.controlplane import STORAGE_CLASS
from tests.k8s.test_operator import broker_cr, condition, wait_status
from testkit.wait import poll_until


def claims(cp, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in cp.get("pvc", None, ns)["items"]
            if p["metadata"]["name"].startswith(f"data-{CLUSTER}-broker-")}


def resized(reason: str, generation: int):
    def check(o: dict) -> bool:
        c = condition(o, "StorageResized") or {}
        return c.get("reason") == reason and o["status"].get("observedGeneration") == generation
    return check


def failures_since(log: str, mark: int, ns: str) -> list[str]:
    """This Broker's failed reconciles (other tests' namespaces may still be terminating)."""
    return [line for line in log[mark:].splitlines() if f"[{ns}/" in line and (
        ("Handler 'brokers-" in line and "failed" in line) or "Timer 'brokers-resync' failed" in line)]


def set_expansion(cp, allowed: bool) -> None:
    cp.kubectl("patch", "storageclass", STORAGE_CLASS, "--type=merge", "-p",
               json.dumps({"allowVolumeExpansion": allowed}))


def test_raising_storage_size_recreates_the_set_expands_what_it_can_and_says_what_it_cannot(
        control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=2), ns)
    wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True", "Ready", 120)
    poll_until("two bound claims", lambda: len(claims(cp, ns)) == 2 and all(
        p["status"].get("phase") == "Bound" for p in claims(cp, ns).values()), 60)
    sts_uid = cp.get("statefulset", f"{CLUSTER}-broker", ns)["metadata"]["uid"]
    pod_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cp.get("pods", None, ns)["items"]
                if p["metadata"]["name"].startswith(f"{CLUSTER}-broker-")}
    assert cp.get("storageclass", STORAGE_CLASS).get("allowVolumeExpansion") is not True
    mark = len(operator_logs.log_text())

    # 1) the class does not allow expansion: the set is recreated with the new size, the pods keep
    # running, and the status names the claims that keep 1Gi
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"storage":{"size":"2Gi"}}}')
    broker = wait_status(cp, "broker", CLUSTER, ns, resized("ExpansionNotSupported", 2), "ExpansionNotSupported", 90)
    message = condition(broker, "StorageResized")["message"]
    assert f"data-{CLUSTER}-broker-0" in message and "does not allow volume expansion" in message
    sts = poll_until("the StatefulSet recreated with 2Gi claims", lambda: (lambda o: o if o and o["metadata"]["uid"] != sts_uid
                     else None)(cp.get("statefulset", f"{CLUSTER}-broker", ns)), 60)
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cp.get("pods", None, ns)["items"]
           if p["metadata"]["name"].startswith(f"{CLUSTER}-broker-")}
    assert now == pod_uids, "the broker pods were restarted"
    # adopted by the new set
    poll_until("pods adopted", lambda: all((p["metadata"].get("ownerReferences") or [{}])[0].get("uid") == sts["metadata"]["uid"]
                                           for p in cp.get("pods", None, ns)["items"]
                                           if p["metadata"]["name"] in pod_uids), 60)
    assert {p["spec"]["resources"]["requests"]["storage"] for p in claims(cp, ns).values()} == {"1Gi"}
    wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True"
                and o["status"].get("appliedGeneration") == 2, "Ready and applied", 60)

    # 2) the class allows it: the claims are asked to grow; Resizing until the storage reports the
    # new capacity (no resizer runs here: the test plays it), then AtRequestedSize
    set_expansion(cp, True)
    try:
        cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"storage":{"size":"3Gi"}}}')
        wait_status(cp, "broker", CLUSTER, ns, resized("Resizing", 3), "Resizing", 90)
        assert {p["spec"]["resources"]["requests"]["storage"] for p in claims(cp, ns).values()} == {"3Gi"}
        for name in claims(cp, ns):
            cp.kubectl("patch", "pvc", name, "-n", ns, "--subresource=status", "--type=merge", "-p",
                       '{"status":{"capacity":{"storage":"3Gi"}}}')
        wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "StorageResized") or {}).get("status") == "True",
                    "AtRequestedSize", 60)
    finally:
        set_expansion(cp, False)
    assert cp.get("statefulset", f"{CLUSTER}-broker", ns)["spec"]["volumeClaimTemplates"][0]["spec"]["resources"][
        "requests"]["storage"] == "3Gi"
    failures = failures_since(operator_logs.log_text(), mark, ns)
    assert not failures, failures
