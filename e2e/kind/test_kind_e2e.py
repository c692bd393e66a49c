"""The operator scenarios on a real kind cluster (run by e2e/kind/run.sh, `make e2e-kind`).

Unlike the local control plane (tests/k8s), pods really run here: the broker image starts
name servers and brokers, their /healthz and /readyz probes gate readiness, and the operator
(in its own pod, installed by the chart) reaches them by their in-cluster DNS names.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from tests.k8s.controlplane import wait_until

pytestmark = [pytest.mark.kind,
              pytest.mark.skipif(os.environ.get("FERRYMQ_KIND_TESTS") != "1",
                                 reason="kind e2e: run `make e2e-kind` (needs a Docker engine)")]
API = "ferrymq.io/v1alpha1"


def kubectl(*args, input=None, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p


def get(kind, name, ns):
    p = kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def cond(obj, type_):
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def apply(ns, *objs):
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


@pytest.fixture
def ns():
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_broker_topic_group_lifecycle(ns):
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": "demo"},
               "spec": {"replicas": 2, "storage": {"size": "1Gi"}, "nameServer": {"replicas": 1}}})
    wait_until("Broker Ready", lambda: cond(get("broker", "demo", ns), "Ready").get("status") == "True", 600, interval=2)
    b = get("broker", "demo", ns)
    assert b["status"]["readyReplicas"] == 2 and b["status"]["observedGeneration"] == b["metadata"]["generation"]

    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "orders"},
               "spec": {"brokerRef": {"name": "demo"}, "readQueueNums": 4, "writeQueueNums": 4}},
          {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "billing"},
           "spec": {"brokerRef": {"name": "demo"}}})
    t = wait_until("Topic Ready", lambda: (lambda o: o if cond(o, "Ready").get("status") == "True" else None)(
        get("topic", "orders", ns)), 180, interval=2)
    assert sorted(x["name"] for x in t["status"]["brokers"]) == ["demo-broker-0", "demo-broker-1"]
    wait_until("ConsumerGroup Ready", lambda: cond(get("consumergroup", "billing", ns), "Ready").get("status") == "True",
               180, interval=2)
    # Seen from inside a broker pod, through the name-server Service, with the ferrymq CLI.
    route = kubectl("exec", "-n", ns, "demo-broker-0", "--", "ferrymq", "admin", "topic", "route", "orders",
                    "-n", f"demo-namesrv.{ns}.svc:9876", "--json").stdout
    assert "demo-broker-0" in route and "demo-broker-1" in route

    kubectl("delete", "topic", "orders", "-n", ns, "--timeout=120s")
    listing = kubectl("exec", "-n", ns, "demo-broker-0", "--", "ferrymq", "admin", "topic", "list",
                      "-n", f"demo-namesrv.{ns}.svc:9876").stdout
    assert "orders" not in listing.split()


def test_invalid_resources_are_rejected(ns):
    bad = {"apiVersion": API, "kind": "Topic", "metadata": {"name": "neg"},
           "spec": {"brokerRef": {"name": "demo"}, "readQueueNums": -1}}
    p = kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert p.returncode != 0 and "should be greater than or equal to 1" in p.stderr
