"""The operator on a real API server: Broker -> objects and status; Topic and ConsumerGroup ->
real FerryMQ brokers; invalid resources rejected by the API server."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferrymq.client.admin import AdminClient
from tests.k8s.conftest import CLUSTER
from testkit.wait import poll_until

API = "ferrymq.io/v1alpha1"


def admin_call(ferry_cluster, fn):
    """Run ``fn(admin)`` against the real brokers (a fresh event loop per call: these tests are sync)."""
    async def go():
        async with AdminClient(namesrv_addr=ferry_cluster.namesrv_addr) as admin:
            return await fn(admin)
    return asyncio.run(go())


def topic_on_brokers(ferry_cluster, topic: str) -> dict[str, tuple[int, int, int]]:
    async def fn(admin):
        out = {}
        for name, addr in (await admin.master_addrs(CLUSTER)).items():
            cfg = (await admin.topic_configs(addr)).get(topic)
            if cfg:
                out[name] = (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm)
        return out
    return admin_call(ferry_cluster, fn)


def condition(obj: dict | None, type_: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def wait_status(cp, kind, name, ns, pred, what, timeout=90):
    return poll_until(f"{kind}/{name} {what}", lambda: (lambda o: o if o and pred(o) else None)(cp.get(kind, name, ns)),
                      timeout, interval=0.3, diagnostics=lambda: json.dumps(cp.get(kind, name, ns), indent=1)[-4000:])


def broker_cr(replicas=2, **spec) -> dict:
    return {"apiVersion": API, "kind": "Broker", "metadata": {"name": CLUSTER},
            "spec": {"replicas": replicas, "image": "ferrymq/broker:test", "storage": {"size": "1Gi"}, **spec}}


# ------------------------------------------------------------------------------ Broker

def test_broker_becomes_statefulsets_services_pvcs_and_ready_status(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(), ns)
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True"
                         and o["status"].get("observedGeneration") == o["metadata"]["generation"], "Ready", 120)
    assert broker["status"]["readyReplicas"] == 2 and broker["status"]["phase"] == "Ready"
    assert broker["status"]["nameServers"] == [f"{CLUSTER}-namesrv-0.{CLUSTER}-namesrv-headless.{ns}.svc:9876"]
    uid = broker["metadata"]["uid"]
    for kind, name in [("statefulset", f"{CLUSTER}-broker"), ("statefulset", f"{CLUSTER}-namesrv"),
                       ("service", f"{CLUSTER}-namesrv"), ("service", f"{CLUSTER}-namesrv-headless"),
                       ("service", f"{CLUSTER}-broker-headless"), ("configmap", f"{CLUSTER}-config"),
                       ("poddisruptionbudget", f"{CLUSTER}-broker"), ("poddisruptionbudget", f"{CLUSTER}-namesrv")]:
        obj = cp.get(kind, name, ns)
        assert obj is not None, f"{kind}/{name} missing"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    sts = cp.get("statefulset", f"{CLUSTER}-broker", ns)
    assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    pvcs = cp.get("pvc", None, ns)["items"]
    assert sorted(p["metadata"]["name"] for p in pvcs) == [f"data-{CLUSTER}-broker-0", f"data-{CLUSTER}-broker-1"]
    assert all(p["status"]["phase"] == "Bound" for p in pvcs)
    pods = cp.get("pods", None, ns)["items"]
    assert len(pods) == 3 and all(p["status"]["phase"] == "Running" for p in pods)
    # printer columns
    table = cp.kubectl("get", "broker", CLUSTER, "-n", ns).stdout
    assert table.split()[:5] == ["NAME", "DESIRED", "READY", "PHASE", "STATUS"] and "True" in table
    assert CLUSTER in cp.kubectl("get", "ferrymq", "-n", ns).stdout, "category ferrymq lists Brokers"
    # the scale subresource
    scale = json.loads(cp.kubectl("get", "--raw", f"/apis/{API}/namespaces/{ns}/brokers/{CLUSTER}/scale").stdout)
    assert scale["status"]["replicas"] == 2 and "app.kubernetes.io/component=broker" in scale["status"]["selector"]


def test_config_change_restarts_broker_pods_one_at_a_time(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(), ns)
    wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready", "Ready", 120)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cp.get("pods", None, ns)["items"]}
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"config":{"flushDiskType":"SYNC_FLUSH"}}}')
    seen_not_ready: set[int] = set()

    def restarted():
        pods = {p["metadata"]["name"]: p for p in cp.get("pods", None, ns)["items"]
                if p["metadata"]["labels"].get("app.kubernetes.io/component") == "broker"}
        not_ready = [n for n, p in pods.items() if p["metadata"].get("deletionTimestamp")
                     or not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
        seen_not_ready.add(len(not_ready) + (2 - len(pods)))
        return all(pods.get(n) and pods[n]["metadata"]["uid"] != before[n] for n in pods if "broker" in n) and \
            len(pods) == 2 and not not_ready
    poll_until("both broker pods restarted", restarted, 120, interval=0.2)
    assert max(seen_not_ready) <= 1, "never more than one broker down at a time"
    conf = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    assert "flushDiskType=SYNC_FLUSH" in conf
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("phase") == "Ready"
                         and o["status"]["observedGeneration"] == o["metadata"]["generation"], "Ready again")
    assert (condition(broker, "Restarting") or {}).get("status") == "False"
    nsrv = [p for p in cp.get("pods", None, ns)["items"] if "namesrv" in p["metadata"]["name"]]
    assert [p["metadata"]["uid"] for p in nsrv] == [before[f"{CLUSTER}-namesrv-0"]], "name servers are not restarted"


def test_an_invalid_config_is_reported_and_the_running_brokers_are_left_alone(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=1), ns)
    wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready", "Ready", 120)
    pod_uid = cp.get("pod", f"{CLUSTER}-broker-0", ns)["metadata"]["uid"]
    conf_before = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"config":{"flushDiskType":"SYNC"}}}')
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("phase") == "InvalidConfig"
                         and o["status"]["observedGeneration"] == o["metadata"]["generation"], "InvalidConfig")
    ready = condition(broker, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidConfig")
    assert "flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, got 'SYNC'" in ready["message"]
    assert broker["status"]["appliedGeneration"] < broker["metadata"]["generation"]
    assert cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"] == conf_before
    assert cp.get("pod", f"{CLUSTER}-broker-0", ns)["metadata"]["uid"] == pod_uid
    events = cp.get("events", None, ns)["items"]
    assert any(e["reason"] == "ReadyFalse" and "flushDiskType" in e["message"] for e in events)
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"config":{"flushDiskType":null}}}')
    wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("phase") == "Ready"
                and o["status"]["appliedGeneration"] == o["metadata"]["generation"], "Ready again")
    assert cp.get("pod", f"{CLUSTER}-broker-0", ns)["metadata"]["uid"] == pod_uid  # same config: no restart


def test_paused_broker_is_left_alone(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    b = broker_cr(replicas=1)
    b["metadata"]["annotations"] = {"ferrymq.io/pause-reconciliation": "true"}
    cp.apply(b, ns)
    wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "ReconciliationPaused") or {}).get("status") == "True",
                "paused")
    assert cp.get("statefulset", f"{CLUSTER}-broker", ns) is None
    cp.kubectl("annotate", "broker", CLUSTER, "-n", ns, "ferrymq.io/pause-reconciliation-")
    wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready", "Ready", 120)


# ------------------------------------------------------------------------------ Topic

def topic_cr(name, **spec) -> dict:
    return {"apiVersion": API, "kind": "Topic", "metadata": {"name": name},
            "spec": {"brokerRef": {"name": CLUSTER}, **spec}}


def test_topic_appears_on_every_real_broker_is_resynced_and_deleted(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    cp.apply([broker_cr(), topic_cr("orders", readQueueNums=4, writeQueueNums=4)], ns)
    wait_status(cp, "topic", "orders", ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True", "Ready")
    assert topic_on_brokers(ferry_cluster, "orders") == {f"{CLUSTER}-broker-0": (4, 4, 6), f"{CLUSTER}-broker-1": (4, 4, 6)}
    t = cp.get("topic", "orders", ns)
    assert t["status"]["observedGeneration"] == t["metadata"]["generation"]
    assert sorted(b["name"] for b in t["status"]["brokers"]) == [f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"]
    assert "ferrymq.io/finalizer" in t["metadata"]["finalizers"]

    # more queues: applied on the brokers
    cp.kubectl("patch", "topic", "orders", "-n", ns, "--type=merge", "-p", '{"spec":{"writeQueueNums":8,"readQueueNums":8}}')
    poll_until("8 queues on the brokers", lambda: set(topic_on_brokers(ferry_cluster, "orders").values()) == {(8, 8, 6)}, 60)

    # a broker that lost the topic (new or recovered broker) gets it back from the resync timer
    async def drop_on_one(admin):
        addr = (await admin.master_addrs(CLUSTER))[f"{CLUSTER}-broker-1"]
        from ferrymq.remoting.codes import RequestCode
        from ferrymq.remoting.command import RemotingCommand
        await admin.instance.invoke_broker(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "orders"}))
    admin_call(ferry_cluster, drop_on_one)
    assert f"{CLUSTER}-broker-1" not in topic_on_brokers(ferry_cluster, "orders")
    poll_until("topic re-created by resync", lambda: len(topic_on_brokers(ferry_cluster, "orders")) == 2, 60)

    # deleted: gone from the brokers and the name server
    cp.kubectl("delete", "topic", "orders", "-n", ns, "--timeout=60s")
    assert topic_on_brokers(ferry_cluster, "orders") == {}
    assert "orders" not in admin_call(ferry_cluster, lambda a: a.topic_list())


def test_unmanaged_topic_is_kept_on_delete_and_conflicts_are_reported(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    cp.apply([broker_cr(), topic_cr("keepme", topicName="Keep_Me")], ns)
    wait_status(cp, "topic", "keepme", ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True", "Ready")
    cp.apply(topic_cr("keepme-twin", topicName="Keep_Me"), ns)
    twin = wait_status(cp, "topic", "keepme-twin", ns, lambda o: (condition(o, "Ready") or {}).get("reason") == "Conflict",
                       "Conflict")
    assert "keepme already manages topic Keep_Me" in condition(twin, "Ready")["message"]
    cp.kubectl("delete", "topic", "keepme-twin", "-n", ns, "--timeout=60s")
    assert len(topic_on_brokers(ferry_cluster, "Keep_Me")) == 2, "the loser of a conflict deletes nothing"
    cp.kubectl("annotate", "topic", "keepme", "-n", ns, "ferrymq.io/managed=false")
    wait_status(cp, "topic", "keepme", ns, lambda o: (condition(o, "Ready") or {}).get("reason") == "Unmanaged", "Unmanaged")
    cp.kubectl("delete", "topic", "keepme", "-n", ns, "--timeout=60s")
    assert len(topic_on_brokers(ferry_cluster, "Keep_Me")) == 2, "unmanaged: deleting the CR leaves the topic"
    admin_call(ferry_cluster, lambda a: a.delete_topic("Keep_Me", cluster=CLUSTER))


# ------------------------------------------------------------------------------ invalid resources

@pytest.mark.parametrize("obj,message", [
    (topic_cr("neg", readQueueNums=-1), "spec.readQueueNums: Invalid value: -1: spec.readQueueNums in body should be greater than or equal to 1"),
    (topic_cr("big", writeQueueNums=2000), "should be less than or equal to 1024"),
    (topic_cr("bad.name"), "metadata.name is not a valid RocketMQ topic name"),
    (topic_cr("ok", topicName="bad topic!"), "spec.topicName in body should match"),
    (topic_cr("perm", perm=7), "spec.perm: Unsupported value: 7"),
    (topic_cr("extra", bogus=1), 'unknown field "spec.bogus"'),
    ({"apiVersion": API, "kind": "Topic", "metadata": {"name": "noref"}, "spec": {}}, "spec.brokerRef: Required value"),
    (broker_cr(replicas=-2), "spec.replicas in body should be greater than or equal to 0"),
    (broker_cr(config={"brokerName": "x"}), "brokerName, brokerIP1, brokerClusterName, namesrvAddr and listenPort are set by the operator"),
    (broker_cr(storage={"size": "ten gigs"}), "spec.storage.size in body should match"),
    ({"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "g"},
      "spec": {"brokerRef": {"name": CLUSTER}, "protection": {"onFallBehind": "Panic"}}},
     'spec.protection.onFallBehind: Unsupported value: "Panic"'),
])
def test_invalid_resources_are_rejected_by_the_api_server(control_plane, helm_release, namespace, obj, message):
    p = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_queue_counts_cannot_decrease(control_plane, helm_release, namespace):
    cp, ns = control_plane, namespace
    cp.apply(topic_cr("shrink", readQueueNums=8, writeQueueNums=8), ns)
    p = cp.kubectl("patch", "topic", "shrink", "-n", ns, "--type=merge", "-p", '{"spec":{"readQueueNums":4}}', check=False)
    assert p.returncode != 0 and "readQueueNums cannot decrease" in p.stderr, p.stderr
    p = cp.kubectl("patch", "topic", "shrink", "-n", ns, "--type=merge", "-p", '{"spec":{"topicName":"other"}}', check=False)
    assert p.returncode != 0 and "topicName cannot be added or removed" in p.stderr, p.stderr
    cp.apply(broker_cr(storage={"size": "2Gi"}, **{"replicas": 1}), ns)
    p = cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p", '{"spec":{"storage":{"size":"1Gi"}}}', check=False)
    assert p.returncode != 0 and "storage.size cannot decrease" in p.stderr, p.stderr
    cp.kubectl("annotate", "topic", "shrink", "-n", ns, "ferrymq.io/managed=false")  # no broker-side cleanup needed


def test_restart_annotation_rolls_the_broker_pods(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(replicas=1), ns)
    b = wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready", "Ready", 120)
    old_hash, old_uid = b["status"]["configHash"], cp.get("pod", f"{CLUSTER}-broker-0", ns)["metadata"]["uid"]
    cp.kubectl("annotate", "broker", CLUSTER, "-n", ns, "ferrymq.io/restart=2026-11-21T06:00")
    poll_until("broker pod replaced", lambda: (lambda p: p and p["metadata"]["uid"] != old_uid and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])))(
        cp.get("pod", f"{CLUSTER}-broker-0", ns)), 90)
    b = wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("phase") == "Ready", "Ready again")
    assert b["status"]["configHash"] != old_hash


def test_unsupported_change_is_reported(control_plane, operator_logs, ferry_cluster, namespace):
    """The brokers already have more queues than the Topic asks for: reported, not shrunk."""
    cp, ns = control_plane, namespace
    admin_call(ferry_cluster, lambda a: a.create_topic("Wide", read_queues=16, write_queues=16, cluster=CLUSTER))
    try:
        cp.apply([broker_cr(), topic_cr("wide", topicName="Wide", readQueueNums=8, writeQueueNums=8)], ns)
        t = wait_status(cp, "topic", "wide", ns, lambda o: (condition(o, "UnsupportedChange") or {}).get("status") == "True",
                        "UnsupportedChange")
        assert "readQueueNums 16 -> 8" in condition(t, "UnsupportedChange")["message"]
        assert condition(t, "Ready")["status"] == "False"
        assert set(topic_on_brokers(ferry_cluster, "Wide").values()) == {(16, 16, 6)}
    finally:
        cp.kubectl("annotate", "topic", "wide", "-n", ns, "ferrymq.io/managed=false", check=False)
        admin_call(ferry_cluster, lambda a: a.delete_topic("Wide", cluster=CLUSTER))
