"""spec.replication.failover on a real API server: the operator runs one failover controller
(StatefulSet with its own claim, headless Service, owned by the Broker) and points the brokers
at it; turning failover off retires it; the API server refuses failover without a slave to
promote and the controller keys in spec.config. (Promotion itself is a broker and controller
matter, tested with real processes in tests/integration/test_failover.py: kwok pods run nothing.)"""

from __future__ import annotations

import json

import pytest

from tests.k8s.conftest import CLUSTER
from tests.k8s.test_operator import broker_cr
from tests.support import poll_until


def test_failover_runs_one_controller_the_brokers_are_pointed_at(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=1, replication={"slavesPerGroup": 1, "mode": "Sync", "failover": True,
                                                "failoverTimeoutSeconds": 5}), ns)
    sts = poll_until("the controller StatefulSet", lambda: cp.get("statefulset", f"{CLUSTER}-controller", ns), 120)
    broker = cp.get("broker", CLUSTER, ns)
    assert sts["metadata"]["ownerReferences"][0]["uid"] == broker["metadata"]["uid"]
    assert sts["spec"]["replicas"] == 1
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--failover-timeout") + 1] == "5000"
    assert cp.get("service", f"{CLUSTER}-controller", ns)["spec"]["clusterIP"] == "None"
    poll_until("the controller's claim", lambda: f"data-{CLUSTER}-controller-0" in
               {p["metadata"]["name"] for p in cp.get("pvc", None, ns)["items"]}, 60)
    conf = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    assert "enableControllerMode=true" in conf
    assert f"controllerAddr={CLUSTER}-controller-0.{CLUSTER}-controller.{ns}.svc:9878" in conf
    slave_args = cp.get("statefulset", f"{CLUSTER}-broker-s1", ns)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "brokerRole=SLAVE" not in slave_args and "brokerId=1" in slave_args

    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"replication":{"failover":false}}}')
    poll_until("the controller retired", lambda: cp.get("statefulset", f"{CLUSTER}-controller", ns) is None, 120)
    assert cp.get("service", f"{CLUSTER}-controller", ns) is None
    assert "enableControllerMode" not in cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]


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
