"""FerryMQ's user story on a real kind cluster (run by e2e/kind/run.sh, `make e2e-kind`).

Unlike the local control plane (tests/k8s, kwok nodes), everything here really runs: the operator
in its own pod from its image, installed by `helm install` of the chart (run.sh does that) under
the chart's RBAC; name servers and brokers in pods of the broker image with PVCs from local-path;
readiness gated by /readyz; clients as pods and Jobs of the same image; Spark's driver and executor
pods from the Spark image. The scenarios run in file order and share one Broker ("demo": 2 name
servers, 2 brokers) where that is what a user would do; the last one uninstalls the chart.

All client traffic is in-cluster (pods dialling Services and pod IPs of the kind network); the
test process itself only talks to the API server kind published on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from e2e.kind.kube import (
    API, BROKER_IMAGE, SPARK_IMAGE, apply, condition, get, items, kubectl, pause_reconciliation, pod_ready,
    run_job, run_python, toolbox, unique_name, wait_status,
)
from testkit.wait import poll_until
from testkit.certificates import make_test_certificates

if os.environ.get("FERRYMQ_KIND_TESTS") != "1":
    if os.environ.get("CI") == "true":
        raise RuntimeError("e2e/kind runs through `make e2e-kind` (e2e/kind/run.sh), which sets up the cluster")
    pytest.skip("kind e2e: run `make e2e-kind` (it builds and starts the cluster)", allow_module_level=True)

pytestmark = pytest.mark.kind
BROKER = "demo"


def namesrv(ns: str) -> str:
    return f"{BROKER}-namesrv.{ns}.svc:9876"


def broker_pods(ns: str, broker: str = BROKER) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in items("pods", ns, f"app.kubernetes.io/instance={broker},"
                                                                 "app.kubernetes.io/component=broker")}


def ready(obj: dict) -> bool:
    return condition(obj, "Ready").get("status") == "True"


@pytest.fixture(scope="module")
def ns():
    name = unique_name("e2e")
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def tools(ns):
    return toolbox(ns)


# ------------------------------------------------------------------------------------------------
# 1. A Broker: real pods, PVCs, Services, DNS, readiness through /readyz

def test_broker_runs_in_pods_with_pvcs_services_and_dns(ns, tools):
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": BROKER},
               "spec": {"replicas": 2, "imagePullPolicy": "Never", "storage": {"size": "1Gi"},
                        "nameServer": {"replicas": 2}}})
    b = wait_status("broker", BROKER, ns, lambda o: ready(o) and o["status"].get("observedGeneration")
                    == o["metadata"]["generation"], "Ready", 600)
    assert b["status"]["readyReplicas"] == 2 and b["status"]["phase"] == "Ready"
    pvcs = {p["metadata"]["name"]: p for p in items("pvc", ns)}
    assert sorted(pvcs) == [f"data-{BROKER}-broker-0", f"data-{BROKER}-broker-1"]
    assert all(p["status"]["phase"] == "Bound" and p["spec"]["storageClassName"] == "standard" for p in pvcs.values())
    pods = items("pods", ns, f"app.kubernetes.io/instance={BROKER}")
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{BROKER}-broker-0", f"{BROKER}-broker-1",
                                                          f"{BROKER}-namesrv-0", f"{BROKER}-namesrv-1"]
    for p in pods:
        c = p["spec"]["containers"][0]
        assert c["image"] == BROKER_IMAGE and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert pod_ready(p) and p["status"]["podIP"].startswith("10.244.")
    # Seen from a client pod: DNS names resolve to the pods, /readyz answers, the name servers
    # route to both brokers (each registered under its stable DNS name).
    out = run_python(ns, f"""
        import json, socket, urllib.request
        ns = {ns!r}
        names = {{n: sorted({{a[4][0] for a in socket.getaddrinfo(n, 9876, proto=socket.IPPROTO_TCP)}})
                 for n in [f"demo-namesrv.{{ns}}.svc", f"demo-namesrv-headless.{{ns}}.svc",
                           f"demo-broker-0.demo-broker-headless.{{ns}}.svc"]}}
        readyz = urllib.request.urlopen(f"http://demo-broker-1.demo-broker-headless.{{ns}}.svc:8080/readyz", timeout=5)
        print(json.dumps({{"names": names, "readyz": [readyz.status, readyz.read().decode().strip()]}}))
    """)[0]
    headless = out["names"][f"demo-namesrv-headless.{ns}.svc"]
    assert len(headless) == 2, out
    assert out["names"][f"demo-namesrv.{ns}.svc"] and out["names"][f"demo-broker-0.demo-broker-headless.{ns}.svc"]
    assert out["readyz"] == [200, "ready"]
    cluster = json.loads(kubectl("exec", "-n", ns, tools, "--", "ferrymq", "admin", "cluster", "list",
                                 "-n", namesrv(ns), "--json").stdout)
    assert sorted(cluster_broker_names(cluster)) == [f"{BROKER}-broker-0", f"{BROKER}-broker-1"], cluster

    # rocketmq.namesrv.domain: the address service lists both name servers, and a client
    # given only that finds the cluster
    assert sorted(address_service_list(ns)) == sorted(f"{ip}:9876" for ip in headless)
    assert sorted(cluster_broker_names(cluster_via_address_service(ns, tools))) == [f"{BROKER}-broker-0",
                                                                                      f"{BROKER}-broker-1"]
    # A third name server: listed by the service, and both brokers register with it, no restarts
    before = {name: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
              for name, p in broker_pods(ns).items()}
    kubectl("patch", "broker", BROKER, "-n", ns, "--type=merge", "-p", '{"spec":{"nameServer":{"replicas":3}}}')
    wait_status("broker", BROKER, ns, lambda o: ready(o) and o["status"].get("observedGeneration")
                == o["metadata"]["generation"], "Ready with three name servers", 300)
    poll_until("three name servers served", lambda: len(address_service_list(ns)) == 3, 120, interval=3)
    third = f"{BROKER}-namesrv-2.{BROKER}-namesrv-headless.{ns}.svc:9876"

    def brokers_on_third() -> list[str]:
        p = kubectl("exec", "-n", ns, tools, "--", "ferrymq", "admin", "cluster", "list", "-n", third, "--json",
                    check=False)
        return cluster_broker_names(json.loads(p.stdout)) if p.returncode == 0 else []
    poll_until("both brokers registered with the new name server", lambda: len(brokers_on_third()) == 2, 120,
               interval=3)
    after = {name: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
             for name, p in broker_pods(ns).items()}
    assert after == before, "adding a name server restarted no broker"


def address_service_list(ns: str) -> list[str]:
    out = run_python(ns, f"""
        import json, urllib.request
        body = urllib.request.urlopen("http://{BROKER}-nsaddr.{ns}.svc:8080/rocketmq/nsaddr", timeout=5).read()
        print(json.dumps({{"list": body.decode().strip()}}))
    """)[0]
    return [a for a in out["list"].split(";") if a]


def cluster_via_address_service(ns: str, tools: str) -> dict:
    return json.loads(kubectl("exec", "-n", ns, tools, "--", "env", "-u", "NAMESRV_ADDR",
                              f"FERRYMQ_NAMESRV_DOMAIN={BROKER}-nsaddr.{ns}.svc", "ferrymq", "admin", "cluster",
                              "list", "--json").stdout)


def cluster_broker_names(cluster: dict) -> list[str]:
    text = json.dumps(cluster)
    return [n for n in (f"{BROKER}-broker-0", f"{BROKER}-broker-1") if n in text]


# ------------------------------------------------------------------------------------------------
# 2. Topic and ConsumerGroup with kubectl; a producer Job and a consumer Job

def test_topic_and_group_from_kubectl_then_producer_and_consumer_jobs(ns, tools):
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "orders"},
               "spec": {"brokerRef": {"name": BROKER}, "readQueueNums": 4, "writeQueueNums": 4}},
          {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "billing"},
           "spec": {"brokerRef": {"name": BROKER}}})
    t = wait_status("topic", "orders", ns, ready, "Ready", 180)
    assert sorted(x["name"] for x in t["status"]["brokers"]) == [f"{BROKER}-broker-0", f"{BROKER}-broker-1"]
    wait_status("consumergroup", "billing", ns, ready, "Ready", 180)
    n = 1000
    produced = [json.loads(line) for line in run_job(ns, "produce-orders", [
        "produce", "-n", namesrv(ns), "-t", "orders", "--count", str(n), "--keys", "order-{i}", "--json"]).splitlines()
        if line.startswith("{")]
    assert len(produced) == n and {p["status"] for p in produced} == {"SEND_OK"}
    assert {p["brokerName"] for p in produced} == {f"{BROKER}-broker-0", f"{BROKER}-broker-1"}
    consumed = [json.loads(line) for line in run_job(ns, "consume-orders", [
        "consume", "-n", namesrv(ns), "-t", "orders", "-g", "billing", "--from", "earliest", "--count", str(n),
        "--timeout", "180", "--commit", "--json"]).splitlines() if line.startswith("{")]
    assert len(consumed) == n
    assert {c["msgId"] for c in consumed} == {p["msgId"] for p in produced}
    assert sorted(int(c["keys"].split("-")[1]) for c in consumed) == list(range(n))
    g = wait_status("consumergroup", "billing", ns, lambda o: o.get("status", {}).get("totalLag") == 0
                    and any(x.get("topic") == "orders" for x in o["status"].get("lag", [])), "lag 0", 120)
    assert g["status"]["consumeEnabled"] is True


# ------------------------------------------------------------------------------------------------
# 3. A broker pod force-deleted under load keeps every acknowledged message

PRODUCE_FOR = """
    import asyncio, json, os, sys, time
    from ferrymq.client.producer import Producer
    from ferrymq.common.message import Message

    namesrv, topic, seconds, stop_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

    async def main():
        deadline = time.monotonic() + seconds
        async with Producer(f"load-{topic}", namesrv_addr=namesrv, send_timeout=3.0, retry_times=4) as p:
            i = 0
            while time.monotonic() < deadline and not os.path.exists(stop_file) and i < 50000:
                try:
                    m = Message(topic, f"m{i}".encode())
                    m.keys = [f"k{i}"]
                    r = await p.send(m)
                    print(json.dumps({"i": i, "msgId": r.msg_id, "broker": r.message_queue.broker_name,
                                      "queue": r.message_queue.queue_id, "offset": r.queue_offset}), flush=True)
                except Exception as e:
                    print(json.dumps({"i": i, "failed": f"{type(e).__name__}: {e}"}), flush=True)
                    await asyncio.sleep(0.2)
                i += 1
                await asyncio.sleep(0.005)
    asyncio.run(main())
"""

READ_ALL = """
    import asyncio, json, sys
    from ferrymq.client.pull_consumer import PullConsumer

    namesrv, topic = sys.argv[1], sys.argv[2]

    async def main():
        async with PullConsumer(f"audit-{topic}", namesrv_addr=namesrv) as c:
            for mq in await c.fetch_queues(topic):
                offset, end = await c.min_offset(mq), await c.max_offset(mq)
                while offset < end:
                    r = await c.pull(mq, offset, max_nums=32)
                    for m in r.messages:
                        print(json.dumps({"msgId": m.client_msg_id, "broker": mq.broker_name, "queue": mq.queue_id,
                                          "offset": m.queue_offset}))
                    if r.next_begin_offset == offset:
                        break
                    offset = r.next_begin_offset
    asyncio.run(main())
"""


class InClusterLoad:
    """PRODUCE_FOR running in the toolbox pod while the test does something to the cluster."""

    def __init__(self, ns: str, pod: str, topic: str, seconds: float) -> None:
        self.ns, self.pod, self.stop_file = ns, pod, f"/tmp/stop-{topic}"
        kubectl("exec", "-n", ns, pod, "--", "rm", "-f", self.stop_file)
        self.lines: list[dict] = []
        self.proc = subprocess.Popen(
            ["kubectl", "exec", "-i", "-n", ns, pod, "--", "python", "-", namesrv(ns), topic, str(seconds), self.stop_file],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        import textwrap
        self.proc.stdin.write(textwrap.dedent(PRODUCE_FOR))
        self.proc.stdin.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    @property
    def acked(self) -> list[dict]:
        return [x for x in self.lines if "msgId" in x]

    @property
    def failed(self) -> list[dict]:
        return [x for x in self.lines if "failed" in x]

    def stop(self, timeout: float = 120) -> None:
        kubectl("exec", "-n", self.ns, self.pod, "--", "touch", self.stop_file)
        self.proc.wait(timeout)
        self.reader.join(10)
        assert self.proc.returncode == 0, self.proc.stderr.read()[-3000:]


def test_force_deleted_broker_pod_comes_back_with_its_pvc_and_every_acknowledged_message(ns, tools):
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "durable"},
               "spec": {"brokerRef": {"name": BROKER}, "readQueueNums": 2, "writeQueueNums": 2}})
    wait_status("topic", "durable", ns, ready, "Ready", 180)
    victim = f"{BROKER}-broker-0"
    pvc_uid = get("pvc", f"data-{victim}", ns)["metadata"]["uid"]
    pod_uid = get("pod", victim, ns)["metadata"]["uid"]
    load = InClusterLoad(ns, tools, "durable", seconds=240)
    try:
        poll_until("acks from the victim", lambda: sum(a["broker"] == victim for a in load.acked) >= 100, 120, 0.5)
        kubectl("delete", "pod", victim, "-n", ns, "--force", "--grace-period=0")
        killed_at = len(load.acked)
        poll_until(f"{victim} back and Ready", lambda: (lambda p: p and p["metadata"]["uid"] != pod_uid and pod_ready(p))(
            get("pod", victim, ns)), 300, 1)
        poll_until("acks from the victim after its restart",
                   lambda: sum(a["broker"] == victim for a in load.acked[killed_at:]) >= 50, 180, 0.5)
    finally:
        load.stop()
    acked = load.acked
    assert get("pvc", f"data-{victim}", ns)["metadata"]["uid"] == pvc_uid, "the same claim, not a new one"
    stored = run_python(ns, READ_ALL, namesrv(ns), "durable")
    stored_ids = {s["msgId"] for s in stored}
    lost = [a for a in acked if a["msgId"] not in stored_ids]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages are gone, e.g. {lost[:3]}"
    # Each acknowledged message sits where its acknowledgement said.
    where = {(s["broker"], s["queue"], s["offset"]): s["msgId"] for s in stored}
    assert all(where.get((a["broker"], a["queue"], a["offset"])) == a["msgId"] for a in acked)
    assert sum(a["broker"] == victim for a in acked[:killed_at]) >= 100


# ------------------------------------------------------------------------------------------------
# 4. A config change rolls the brokers one at a time while a producer keeps succeeding

def test_config_change_rolls_brokers_one_at_a_time_while_producing(ns, tools):
    wait_status("broker", BROKER, ns, lambda o: o["status"].get("readyReplicas") == 2 and ready(o), "Ready", 300)
    before = {n: p["metadata"]["uid"] for n, p in broker_pods(ns).items()}
    load = InClusterLoad(ns, tools, "durable", seconds=420)
    fewest_ready = [2]
    try:
        poll_until("producer running", lambda: len(load.acked) >= 50, 120, 0.5)
        kubectl("patch", "broker", BROKER, "-n", ns, "--type=merge", "-p", '{"spec":{"config":{"fileReservedTime":"48"}}}')

        def rolled():
            pods = broker_pods(ns)
            fewest_ready[0] = min(fewest_ready[0], sum(pod_ready(p) for p in pods.values()))
            return len(pods) == 2 and all(p["metadata"]["uid"] != before[n] and pod_ready(p) for n, p in pods.items())
        poll_until("both broker pods restarted", rolled, 420, 0.5)
        acked_after_roll = len(load.acked)
        poll_until("sends after the roll", lambda: len(load.acked) >= acked_after_roll + 50, 60, 0.5)
    finally:
        load.stop()
    assert fewest_ready[0] >= 1, "never more than one broker down at a time"
    assert load.failed == [], f"{len(load.failed)} sends failed during the roll, e.g. {load.failed[:3]}"
    assert len(load.acked) > 100
    conf = get("configmap", f"{BROKER}-config", ns)["data"]["broker.conf"]
    assert "fileReservedTime=48" in conf
    b = wait_status("broker", BROKER, ns, lambda o: ready(o) and o["status"]["observedGeneration"] == o["metadata"]["generation"],
                    "Ready again", 300)
    assert b["status"]["readyReplicas"] == 2


# ------------------------------------------------------------------------------------------------
# 5. The group's Spark job: a real driver pod starts executor pods and drains into Parquet on a PVC

COUNT_ROWS = """
    import json, os, sys
    import pyarrow.dataset as ds
    path = sys.argv[1]
    rows = ds.dataset(path, format="parquet", partitioning="hive").count_rows() if os.path.isdir(path) else 0
    print(json.dumps({"rows": rows}))
"""


def test_spark_job_drains_the_group_into_parquet_on_a_pvc(ns, tools):
    n = 600
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "lakefeed"},
               "spec": {"brokerRef": {"name": BROKER}, "readQueueNums": 2, "writeQueueNums": 2}},
          {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "drain-output"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    wait_status("topic", "lakefeed", ns, ready, "Ready", 180)
    run_job(ns, "produce-lakefeed", ["produce", "-n", namesrv(ns), "-t", "lakefeed", "--count", str(n), "--json"])
    volume = {f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.out.{key}": value
              for role in ("driver", "executor")
              for key, value in (("mount.path", "/output"), ("options.claimName", "drain-output"))}
    apply(ns, {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "lake"},
               "spec": {"brokerRef": {"name": BROKER}, "sparkJob": {
                   "schedule": "0 0 1 1 *", "topics": ["lakefeed"], "output": "/output/lakefeed",
                   "image": SPARK_IMAGE, "imagePullPolicy": "Never",
                   "driver": {"cores": 1, "memory": "512m"}, "executor": {"instances": 1, "cores": 1, "memory": "512m"},
                   "sparkConf": {"spark.kubernetes.executor.request.cores": "500m", **volume}}}})
    g = wait_status("consumergroup", "lake", ns, lambda o: (o.get("status", {}).get("sparkJob") or {}).get("cronJob"),
                    "CronJob created", 180)
    cron = g["status"]["sparkJob"]["cronJob"]

    def run(job: str) -> set[str]:
        executors: set[str] = set()
        kubectl("create", "job", job, f"--from=cronjob/{cron}", "-n", ns)

        def finished():
            executors.update(p["metadata"]["name"] for p in items("pods", ns, "spark-role=executor"))
            j = get("job", job, ns)["status"]
            return j.get("succeeded") or j.get("failed")
        poll_until(f"spark job {job}", finished, 900, 2,
                   diagnostics=lambda: kubectl("logs", "-n", ns, f"job/{job}", "--tail=60", check=False).stdout)
        logs = kubectl("logs", "-n", ns, f"job/{job}", "--tail=-1", check=False).stdout
        assert get("job", job, ns)["status"].get("succeeded") == 1, logs[-4000:]
        return executors

    executors = run("drain-1")
    assert executors, "the driver started executor pods"
    rows = count_rows(ns, "count-1")
    assert rows == n
    # The drain committed the group's offsets: its lag on the topic is now known, and 0.
    wait_status("consumergroup", "lake", ns, lambda o: o["status"].get("totalLag") == 0
                and [x["topic"] for x in o["status"].get("lag", [])] == ["lakefeed"], "lag 0 after the drain", 120)
    run("drain-2")
    assert count_rows(ns, "count-2") == n, "a second run writes nothing new"


def count_rows(ns: str, name: str) -> int:
    apply(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"backoffLimit": 0, "template": {"spec": {
                   "restartPolicy": "Never", "securityContext": {"runAsUser": 185, "fsGroup": 185},
                   "containers": [{"name": "count", "image": SPARK_IMAGE, "imagePullPolicy": "Never",
                                   "command": ["python", "-c", COUNT_ROWS.replace("\n    ", "\n"), "/output/lakefeed"],
                                   "volumeMounts": [{"name": "out", "mountPath": "/output", "readOnly": True}]}],
                   "volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "drain-output"}}]}}}})
    wait_status("job", name, ns, lambda j: j.get("status", {}).get("succeeded") or j.get("status", {}).get("failed"),
                "finished", 300)
    out = kubectl("logs", "-n", ns, f"job/{name}").stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])["rows"]


# ------------------------------------------------------------------------------------------------
# 6. Scale down 2 -> 1: blocked while the leaving broker holds unconsumed messages

BACKLOG_ON = """
    import asyncio, json, sys
    from ferrymq.client.producer import Producer
    from ferrymq.client.pull_consumer import PullConsumer
    from ferrymq.common.message import Message
    from ferrymq.common.protocol import MessageQueue

    namesrv, topic, broker, group, count, commit = sys.argv[1:7]

    async def main():
        mq = MessageQueue(topic, broker, 0)
        if int(count):
            async with Producer("drain-producer", namesrv_addr=namesrv) as p:
                for _ in range(int(count)):
                    await p.send(Message(topic, b"payload"), queue=mq)
        async with PullConsumer(group, namesrv_addr=namesrv) as c:
            await c.commit(mq, int(commit))
            print(json.dumps({"max": await c.max_offset(mq)}))
    asyncio.run(main())
"""


def test_scale_down_waits_until_the_leaving_broker_is_drained(ns, tools):
    leaving = f"{BROKER}-broker-1"
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "drainme"},
               "spec": {"brokerRef": {"name": BROKER}, "readQueueNums": 1, "writeQueueNums": 1}},
          {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "drainer"},
           "spec": {"brokerRef": {"name": BROKER}, "protection": {"onFallBehind": "Alert"}}})
    wait_status("topic", "drainme", ns, ready, "Ready", 180)
    wait_status("consumergroup", "drainer", ns, ready, "Ready", 180)
    run_python(ns, BACKLOG_ON, namesrv(ns), "drainme", leaving, "drainer", "3", "0")
    kubectl("scale", "broker", BROKER, "-n", ns, "--replicas=1")
    b = wait_status("broker", BROKER, ns, lambda o: condition(o, "ScaleDownBlocked").get("status") == "True",
                    "ScaleDownBlocked", 120)
    assert f"{leaving} holds" in condition(b, "ScaleDownBlocked")["message"]
    time.sleep(15)  # several broker resyncs (3 s): still blocked, nothing removed
    assert get("statefulset", f"{BROKER}-broker", ns)["spec"]["replicas"] == 2
    assert pod_ready(get("pod", leaving, ns))
    run_python(ns, BACKLOG_ON, namesrv(ns), "drainme", leaving, "drainer", "0", "3")
    wait_status("broker", BROKER, ns, lambda o: condition(o, "ScaleDownBlocked").get("status") == "False"
                and o["status"].get("readyReplicas") == 1 and o["status"].get("phase") == "Ready", "scaled down", 300)
    assert get("statefulset", f"{BROKER}-broker", ns)["spec"]["replicas"] == 1
    poll_until(f"{leaving} gone", lambda: get("pod", leaving, ns) is None, 120)
    assert get("pvc", f"data-{leaving}", ns) is not None, "scale-down keeps the claim"


# ------------------------------------------------------------------------------------------------
# 7. Broker protection trips for a slow group; each policy does what it says

FALL_BEHIND = """
    import asyncio, json, sys
    from ferrymq.client.producer import Producer
    from ferrymq.client.pull_consumer import PullConsumer
    from ferrymq.common.message import Message

    namesrv, pairs = sys.argv[1], sys.argv[2:]

    async def main():
        async with Producer("lag-producer", namesrv_addr=namesrv) as p:
            for topic_group in pairs:
                topic, group = topic_group.split(":")
                async with PullConsumer(group, namesrv_addr=namesrv) as c:
                    mq = (await c.fetch_queues(topic))[0]
                    for _ in range(20):
                        await p.send(Message(topic, b"x" * 200), queue=mq)
                    r = await c.pull(mq, 0, max_nums=1)
                    await c.commit(mq, 1)
                    print(json.dumps({"group": group, "pulled": len(r.messages)}))
    asyncio.run(main())
"""


def test_protection_policies_on_a_slow_group(ns, tools):
    guarded = "guarded"
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": guarded},
               "spec": {"replicas": 1, "imagePullPolicy": "Never", "storage": {"size": "1Gi", "deleteClaim": True},
                        "protection": {"disableConsumeIfConsumerReadSlowly": True, "consumerFallbehindThreshold": "1Ki"},
                        # RocketMQ checks every 3 minutes; the scenario does not wait that long.
                        "config": {"protectBrokerIntervalMillis": "2000"}}})
    wait_status("broker", guarded, ns, ready, "Ready", 600)
    policies = {"Disable": "slow-disable", "ResetToLatest": "slow-reset", "Alert": "slow-alert"}
    for policy, group in policies.items():
        apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": f"t-{group}"},
                   "spec": {"brokerRef": {"name": guarded}, "readQueueNums": 1, "writeQueueNums": 1}},
              {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": group},
               "spec": {"brokerRef": {"name": guarded}, "protection": {"onFallBehind": policy}}})
    for group in policies.values():
        wait_status("topic", f"t-{group}", ns, ready, "Ready", 180)
        wait_status("consumergroup", group, ns, lambda o: ready(o) and o["status"].get("consumeEnabled") is True, "Ready", 180)
    out = run_python(ns, FALL_BEHIND, f"{guarded}-namesrv.{ns}.svc:9876", *(f"t-{g}:{g}" for g in policies.values()))
    assert [o["pulled"] for o in out] == [1, 1, 1]

    g = wait_status("consumergroup", "slow-disable", ns, lambda o: condition(o, "ConsumeDisabled").get("status") == "True",
                    "ConsumeDisabled", 180)
    assert condition(g, "ConsumeDisabled")["reason"] == "BrokerProtection"
    assert g["status"]["consumeEnabled"] is False and g["status"]["totalLag"] == 19
    g = wait_status("consumergroup", "slow-reset", ns, lambda o: condition(o, "ConsumeDisabled").get("reason") == "BacklogSkipped"
                    and o["status"].get("consumeEnabled") is True, "BacklogSkipped", 180)
    wait_status("consumergroup", "slow-reset", ns, lambda o: o["status"].get("totalLag") == 0, "lag 0 after the reset", 120)
    events = items("events", ns)
    assert any(e["involvedObject"]["name"] == "slow-alert" and e["reason"] == "FallingBehind" for e in events) or \
        poll_until("FallingBehind event", lambda: any(e["involvedObject"]["name"] == "slow-alert" and e["reason"] == "FallingBehind"
                                                      for e in items("events", ns)), 120)
    g = get("consumergroup", "slow-alert", ns)
    assert g["status"]["consumeEnabled"] is True and g["status"]["totalLag"] == 19
    # a person re-enables the disabled group with the one-shot annotation
    kubectl("annotate", "consumergroup", "slow-disable", "-n", ns, "ferrymq.io/enable-consume=true")
    wait_status("consumergroup", "slow-disable", ns, lambda o: o["status"].get("consumeEnabled") is True
                and "ferrymq.io/enable-consume" not in (o["metadata"].get("annotations") or {}), "re-enabled", 120)


# ------------------------------------------------------------------------------------------------
# 8. ACL and TLS: a Broker that asks for both, a User's Secret in a Job, a revoked User refused

def test_acl_and_tls_with_users_and_a_revoked_user(ns, tools, tmp_path):
    secure = "secure"
    certs = make_test_certificates(tmp_path / "certs")
    kubectl("create", "secret", "tls", f"{secure}-tls", "-n", ns, f"--cert={certs['server_cert']}",
            f"--key={certs['server_key']}")
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": secure},
               "spec": {"replicas": 1, "imagePullPolicy": "Never", "storage": {"size": "1Gi", "deleteClaim": True},
                        "acl": {"enabled": True}, "tls": {"secretName": f"{secure}-tls"},
                        "grpc": {"enabled": True}}})
    wait_status("broker", secure, ns, lambda o: ready(o) and condition(o, "TlsReady").get("status") == "True", "Ready", 600)
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "payments"},
               "spec": {"brokerRef": {"name": secure}, "readQueueNums": 2, "writeQueueNums": 2}},
          {"apiVersion": API, "kind": "User", "metadata": {"name": "payments-app"},
           "spec": {"brokerRef": {"name": secure},
                    "authorization": {"topics": [{"name": "payments", "perm": "PUB|SUB"}]}}})
    # the operator's own calls go through TLS, signed by its account: the topic gets created
    wait_status("topic", "payments", ns, ready, "Ready", 180)
    # Ready once the broker accepts the User's signed requests: the kubelet refreshes the mounted
    # ACL Secret within about a minute, the User says AclPropagating until then
    user = wait_status("user", "payments-app", ns, ready, "Ready", 300)
    secret = user["status"]["secretName"]
    nsrv = f"{secure}-namesrv.{ns}.svc:9876"
    keys = [{"name": "FERRYMQ_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "accessKey"}}},
            {"name": "FERRYMQ_SECRET_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "secretKey"}}},
            {"name": "FERRYMQ_TLS", "value": "true"}]
    sent = [json.loads(line) for line in run_job(ns, "produce-payments", [
        "produce", "-n", nsrv, "-t", "payments", "--count", "20", "--json"], env=keys).splitlines()
        if line.startswith("{")]
    assert len(sent) == 20 and {s["status"] for s in sent} == {"SEND_OK"}

    def produce_from_toolbox(*flags: str, env: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        return kubectl("exec", "-n", ns, tools, "--", "env", *env, "ferrymq", "produce", "-n", nsrv, "-t", "payments",
                       "-b", "from the toolbox", *flags, check=False)

    unsigned = produce_from_toolbox("--tls-insecure")
    assert unsigned.returncode != 0 and "No accessKey is configured" in unsigned.stdout + unsigned.stderr
    plaintext = produce_from_toolbox()
    assert plaintext.returncode != 0  # enforcing: the plaintext connection is closed
    secret_key = base64.b64decode(get("secret", secret, ns)["data"]["secretKey"]).decode()
    signed = ("FERRYMQ_ACCESS_KEY=payments-app", f"FERRYMQ_SECRET_KEY={secret_key}")
    assert produce_from_toolbox("--tls-insecure", env=signed).returncode == 0

    # The certificate renewed as cert-manager renews it, the Secret updated in place, while a client
    # holds its connections: new connections get the new certificate, the old ones keep answering.
    broker_host = advertised_host(ns, f"{secure}-broker-0", f"{secure}-broker-headless")
    pods = [f"{secure}-broker-0", f"{secure}-namesrv-0"]
    updated, on_disk, summary = renew_while_watching(
        ns, f"{secure}-tls", ns, pods, tmp_path, RENEWAL_WATCH, f"{broker_host}:10911", nsrv, f"{broker_host}:8081",
        "payments-app", secret_key)
    print(renewal_line("broker and name server", updated, on_disk, summary))
    assert set(summary["renewed_at"]) == {"broker", "namesrv", "grpc"}, summary
    assert summary["failures"] == 0 and not summary["reconnected"] and summary["requests"] > 20, summary

    kubectl("delete", "user", "payments-app", "-n", ns, "--timeout=120s")
    # The kubelet refreshes the mounted ACL Secret within about a minute; the broker re-reads it.
    poll_until("the revoked User refused", lambda: "No acl config for payments-app" in (
        lambda p: p.stdout + p.stderr)(produce_from_toolbox("--tls-insecure", env=signed)), 240, interval=5)
    kubectl("delete", "broker", secure, "-n", ns, "--timeout=300s")


def fingerprint(pem: str) -> str:
    """SHA-256 of a PEM certificate's DER form, as RENEWAL_LOOP's served() computes it for a served one."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def renew_while_watching(ns: str, secret: str, secret_ns: str, pods: list[str], tmp_path: Path, watch: str,
                         *args: str, mount: str = "/etc/ferrymq-tls") -> tuple[float, dict[str, float], dict]:
    """Renews the kubernetes.io/tls Secret ``secret`` (in ``secret_ns``) in place, as cert-manager
    does, while ``watch`` (a watcher built on RENEWAL_LOOP) runs in the toolbox pod with ``args``:
    returns when the Secret changed, when each of ``pods`` (in ``secret_ns``) had the renewed
    certificate in its volume at ``mount``, and the watcher's summary."""
    renewed = make_test_certificates(tmp_path / f"renewed-{secret}")
    renewed_cert = Path(renewed["server_cert"]).read_text().strip()
    watched: dict = {}

    def run_watcher() -> None:
        try:
            watched["lines"] = run_python(ns, watch, *args, fingerprint(renewed_cert), "300")
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            watched["error"] = repr(e)
    watcher = threading.Thread(target=run_watcher)
    watcher.start()
    time.sleep(5)  # the watcher's connections are open and answering with the old certificate
    kubectl("apply", "-f", "-", input=kubectl(
        "create", "secret", "tls", secret, "-n", secret_ns, f"--cert={renewed['server_cert']}",
        f"--key={renewed['server_key']}", "--dry-run=client", "-o", "yaml").stdout)
    updated = time.time()
    on_disk: dict[str, float] = {}

    def renewed_on_disk() -> bool:
        # each pod's kubelet refreshes its Secret volume on its own schedule
        for pod in pods:
            if pod not in on_disk and renewed_cert in kubectl(
                    "exec", "-n", secret_ns, pod, "--", "cat", f"{mount}/tls.crt", check=False).stdout:
                on_disk[pod] = time.time()
        return len(on_disk) == len(pods)
    poll_until("the renewed certificate in the pods' volumes", renewed_on_disk, 240, interval=2)
    watcher.join(400)
    summary = (watched.get("lines") or [{}])[-1]
    assert summary.get("done"), watched
    return updated, on_disk, summary


def renewal_line(what: str, updated: float, on_disk: dict[str, float], summary: dict) -> str:
    """One line of figures, in seconds after the Secret changed: when each pod's volume had the
    renewed certificate (the kubelet; looked at every 2 s), when a new connection to each address
    the watcher checked got it (every second or so); then the requests on the connections opened before."""
    volumes = ", ".join(f"{pod} {at - updated:.0f}" for pod, at in on_disk.items())
    served = ", ".join(f"{name} {at - updated:.0f}" for name, at in summary["renewed_at"].items())
    return (f"{what} certificate renewal, seconds after the Secret changed: in the volume of {volumes}; served to a "
            f"new connection by {served or 'none'}; {summary['requests']} requests on the connections opened before, "
            f"{summary['failures']} failed, reconnected: {summary['reconnected']}")


RENEWAL_LOOP = """
    import asyncio, hashlib, json, socket, ssl, sys, time
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.remoting.command import RemotingCommand

    *ARGS, RENEWED, SECONDS = sys.argv[1:]  # renew_while_watching adds the renewed fingerprint and seconds

    def served(address):
        # the certificate a new TLS connection gets (ALPN h2 offered, as gRPC clients do)
        host, port = address.rsplit(":", 1)
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()

    async def watch_renewal(addresses, one_round):
        # Every second: one_round() over the connections opened before (it returns how many requests
        # it sent, how many failed, and whether they all went over those connections), then a new TLS
        # connection to each of addresses (name -> host:port) not yet seen serving the renewed
        # certificate; until all do or SECONDS pass. Prints the summary.
        requests = failures = 0
        reconnected = False
        renewed_at = {}
        deadline = time.monotonic() + float(SECONDS)
        while time.monotonic() < deadline and len(renewed_at) < len(addresses):
            sent, failed, same_connections = await one_round()
            requests, failures, reconnected = requests + sent, failures + failed, reconnected or not same_connections
            for name, address in addresses.items():
                if name not in renewed_at and await asyncio.to_thread(served, address) == RENEWED:
                    renewed_at[name] = time.time()
            await asyncio.sleep(1)
        print(json.dumps({"done": True, "renewed_at": renewed_at, "requests": requests, "failures": failures,
                          "reconnected": reconnected}), flush=True)

    async def remoting_round(client, calls):
        # calls: (address, a function making the request, the response codes that answer it). The
        # client's connections are opened now; each round checks it still uses these.
        first = {address: await client.connection(address) for address, _, _ in calls}

        async def one_round():
            failed, same = 0, True
            for address, request, answers in calls:
                same = same and await client.connection(address) is first[address]
                try:
                    failed += (await client.invoke(address, request(), timeout=5)).code not in answers
                except Exception as e:
                    failed += 1
                    print(json.dumps({"error": f"{address}: {e!r}"}), flush=True)
            return len(calls), failed, same
        return one_round
"""

RENEWAL_WATCH = RENEWAL_LOOP + """
    from ferrymq.acl.signature import Credentials, sign_request
    from ferrymq.remoting.codes import RequestCode
    from ferrymq.remoting.request_headers import SendMessageHeader
    from ferrymq.remoting.tls import ClientTls

    broker, namesrv, grpc, access_key, secret_key = ARGS
    credentials = Credentials(access_key, secret_key)

    def send():  # a producer's send to payments (SEND_OK: 0), signed as the User
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SendMessageHeader(
            producer_group="renewal-watch", topic="payments", queue_id=0,
            born_timestamp=int(time.time() * 1000)).to_fields(), b"sent through the renewal")

    async def main():
        # One client, its two connections opened now and never again: each request goes over them.
        client = RemotingClient(tls=ClientTls(insecure=True).context(),
                                request_hook=lambda r: sign_request(r, credentials))
        one_round = await remoting_round(client, [
            (broker, send, {0}),
            (namesrv, lambda: RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "payments"}), {0})])
        await watch_renewal({"broker": broker, "namesrv": namesrv, "grpc": grpc}, one_round)
        await client.close()
    asyncio.run(main())
"""


# ------------------------------------------------------------------------------------------------
# 9. helm upgrade, then helm uninstall: nothing orphaned but the claims kept by deleteClaim: false
#    and the CRDs (templates of the release, helm.sh/resource-policy: keep)

RELEASE, RELEASE_NS = "ferrymq", "ferrymq-system"
CHART = os.path.join(os.path.dirname(__file__), "..", "..", "charts", "ferrymq-operator")
CRDS = ("brokers.ferrymq.io", "topics.ferrymq.io", "consumergroups.ferrymq.io", "users.ferrymq.io")


def operator_pods() -> list[dict]:
    return items("pods", RELEASE_NS, f"app.kubernetes.io/instance={RELEASE}")


def helm(*args: str) -> str:
    p = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout


# ------------------------------------------------------------------------------------------------
# 9. Replication: a SYNC master and its slave in their own pods; the slave serves every
#    acknowledged message while its master is down

SEND_COUNT = """
    import asyncio, json, sys, time
    from ferrymq.client.producer import Producer
    from ferrymq.common.message import Message

    namesrv, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    async def main():
        async with Producer(f"load-{topic}", namesrv_addr=namesrv, send_timeout=10.0) as p:
            # A SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave has connected (the slave
            # retries every <= 5 s once its master is up): wait for that, at most 120 s.
            deadline = time.monotonic() + 120
            while (await p.send(Message(topic, b"probe"))).status.name != "SEND_OK":
                if time.monotonic() > deadline:
                    raise SystemExit("the slave never connected")
                await asyncio.sleep(1)
            for i in range(count):
                r = await p.send(Message(topic, f"r{i}".encode()))
                print(json.dumps({"msgId": r.msg_id, "status": r.status.name, "broker": r.message_queue.broker_name}),
                      flush=True)
    asyncio.run(main())
"""


SLAVE_KNOWS_TOPIC = """
    import asyncio, sys, time
    from ferrymq.client.admin import AdminClient

    namesrv, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]

    async def main():
        # A slave copies its master's topic config every 10 s once a name server told it the
        # master's address (RocketMQ's SlaveSynchronize): wait until it has this topic.
        deadline = time.monotonic() + 180
        async with AdminClient(namesrv_addr=namesrv) as admin:
            while time.monotonic() < deadline:
                slave = (await admin.cluster_info()).broker_addr_table[group].broker_addrs.get(1)
                if slave and topic in await admin.topic_configs(slave):
                    print('{"synced": true}')
                    return
                await asyncio.sleep(2)
        raise SystemExit("the slave never got the topic's config")
    asyncio.run(main())
"""


def test_a_replicated_group_serves_reads_from_its_slave_while_its_master_is_down(ns, tools):
    ha = "replicated"
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": ha},
               "spec": {"replicas": 1, "imagePullPolicy": "Never", "storage": {"size": "1Gi", "deleteClaim": True},
                        "replication": {"slavesPerGroup": 1, "mode": "Sync"}}})
    broker = wait_status("broker", ha, ns, lambda o: ready(o) and [g["slavesReady"] for g in
                         (o["status"].get("replication") or {}).get("groups", [])] == [1], "Ready with its slave", 600)
    group = broker["status"]["replication"]["groups"][0]
    assert (group["master"]["pod"], group["slaves"][0]["pod"]) == (f"{ha}-broker-0", f"{ha}-broker-s1-0")
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "replicated-orders"},
               "spec": {"brokerRef": {"name": ha}, "readQueueNums": 2, "writeQueueNums": 2}})
    wait_status("topic", "replicated-orders", ns, ready, "Ready", 180)
    nsrv = f"{ha}-namesrv.{ns}.svc:9876"
    sent = run_python(ns, SEND_COUNT, nsrv, "replicated-orders", "200")
    # SYNC_MASTER: SEND_OK only once the slave has the message (else FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE)
    assert len(sent) == 200 and {s["status"] for s in sent} == {"SEND_OK"}, {s["status"] for s in sent}

    assert run_python(ns, SLAVE_KNOWS_TOPIC, nsrv, f"{ha}-broker-0", "replicated-orders") == [{"synced": True}]

    # The master goes away and stays away: reconciliation paused, its StatefulSet scaled to 0.
    pause_reconciliation("broker", ha, ns)
    kubectl("scale", "statefulset", f"{ha}-broker", "-n", ns, "--replicas=0")
    poll_until("the master pod gone", lambda: get("pod", f"{ha}-broker-0", ns) is None, 180, 1)
    stored = run_python(ns, READ_ALL, nsrv, "replicated-orders")  # only the slave can answer now
    missing = {s["msgId"] for s in sent} - {s["msgId"] for s in stored}
    assert not missing, f"{len(missing)} acknowledged messages not readable from the slave"

    # Back to normal: the operator scales the master back, the group is whole again.
    kubectl("annotate", "broker", ha, "-n", ns, "ferrymq.io/pause-reconciliation-")
    wait_status("broker", ha, ns, lambda o: ready(o) and [g["slavesReady"] for g in
                (o["status"].get("replication") or {}).get("groups", [])] == [1]
                and o["status"]["replication"]["groups"][0]["master"]["ready"], "Ready again", 300)
    kubectl("delete", "broker", ha, "-n", ns, "--timeout=300s")


# ------------------------------------------------------------------------------------------------
# 10. Failover: the controller promotes the slave when its master is gone; the old master, back,
#     truncates and rejoins as the new master's slave; nothing acknowledged is lost

GROUP_ADDRS = """
    import asyncio, json, sys
    from ferrymq.client.admin import AdminClient

    namesrv, group = sys.argv[1], sys.argv[2]

    async def main():
        async with AdminClient(namesrv_addr=namesrv) as admin:
            group_data = (await admin.cluster_info()).broker_addr_table.get(group)
            addrs = group_data.broker_addrs if group_data else {}
            print(json.dumps({str(k): v for k, v in addrs.items()}))
    asyncio.run(main())
"""


def group_hosts(ns: str, nsrv: str, group: str) -> dict[int, str]:
    """brokerId -> host of each broker of ``group`` in the name server's cluster table."""
    (addrs,) = run_python(ns, GROUP_ADDRS, nsrv, group)
    return {int(k): v.rsplit(":", 1)[0] for k, v in addrs.items()}


def advertised_host(ns: str, pod: str, headless: str) -> str:
    """The address a broker pod registers with: its stable DNS name (brokerIP1 in manifests.py),
    not its IP, which a rescheduled pod does not keep."""
    return f"{pod}.{headless}.{ns}.svc"


def test_failover_promotes_the_slave_and_the_old_master_rejoins_as_its_slave(ns, tools):
    fo, topic = "failover", "failover-orders"
    group = f"{fo}-broker-0"
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": fo},
               "spec": {"replicas": 1, "imagePullPolicy": "Never", "storage": {"size": "1Gi", "deleteClaim": True},
                        "replication": {"slavesPerGroup": 1, "mode": "Sync", "failover": True,
                                        "failoverTimeoutSeconds": 10}}})
    wait_status("broker", fo, ns, lambda o: ready(o) and [g["slavesReady"] for g in
                (o["status"].get("replication") or {}).get("groups", [])] == [1], "Ready with its slave", 600)
    assert get("statefulset", f"{fo}-controller", ns) is not None, "failover: true runs a controller"
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": topic},
               "spec": {"brokerRef": {"name": fo}, "readQueueNums": 2, "writeQueueNums": 2}})
    wait_status("topic", topic, ns, ready, "Ready", 180)
    nsrv = f"{fo}-namesrv.{ns}.svc:9876"
    before = run_python(ns, SEND_COUNT, nsrv, topic, "100")
    assert len(before) == 100 and {s["status"] for s in before} == {"SEND_OK"}, {s["status"] for s in before}
    assert run_python(ns, SLAVE_KNOWS_TOPIC, nsrv, group, topic) == [{"synced": True}]
    old_master = advertised_host(ns, f"{fo}-broker-0", f"{fo}-broker-headless")
    slave = advertised_host(ns, f"{fo}-broker-s1-0", f"{fo}-broker-s1-headless")
    assert group_hosts(ns, nsrv, group) == {0: old_master, 1: slave}

    # The master goes away and stays away (reconciliation paused, its StatefulSet at 0): after the
    # failover timeout the controller promotes the slave, which registers as the group's master.
    pause_reconciliation("broker", fo, ns)
    kubectl("scale", "statefulset", f"{fo}-broker", "-n", ns, "--replicas=0")
    poll_until("the master pod gone", lambda: get("pod", f"{fo}-broker-0", ns) is None, 180, 1)
    gone = time.monotonic()
    poll_until("the slave promoted to master", lambda: group_hosts(ns, nsrv, group).get(0) == slave, 180, 2)
    print(f"promoted {time.monotonic() - gone:.0f} s after the master pod was gone (failoverTimeoutSeconds 10)")
    stored = run_python(ns, READ_ALL, nsrv, topic)
    missing = {s["msgId"] for s in before} - {s["msgId"] for s in stored}
    assert not missing, f"{len(missing)} acknowledged messages not on the promoted master"

    # The old master comes back (the operator scales it up again): it learns the new epoch, truncates
    # what it may have written after it, and follows the new master; SYNC sends are acknowledged again.
    kubectl("annotate", "broker", fo, "-n", ns, "ferrymq.io/pause-reconciliation-")

    def rejoined() -> bool:
        pod = get("pod", f"{fo}-broker-0", ns)
        return bool(pod and pod_ready(pod)) and group_hosts(ns, nsrv, group) == {0: slave, 1: old_master}
    poll_until("the old master back as the new master's slave", rejoined, 300, 3)
    after = run_python(ns, SEND_COUNT, nsrv, topic, "50")
    assert len(after) == 50 and {s["status"] for s in after} == {"SEND_OK"}, {s["status"] for s in after}
    stored = run_python(ns, READ_ALL, nsrv, topic)
    missing = {s["msgId"] for s in before + after} - {s["msgId"] for s in stored}
    assert not missing, f"{len(missing)} acknowledged messages missing after the old master rejoined"
    kubectl("delete", "broker", fo, "-n", ns, "--timeout=300s")


# ------------------------------------------------------------------------------------------------
# 11. TLS on the failover controllers: the Secret renewed in place, new connections get the new
#     certificate, connections opened before keep answering, the group keeps taking sends

CONTROLLER_RENEWAL_WATCH = RENEWAL_LOOP + """
    from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE, CONTROLLER_NOT_LEADER
    from ferrymq.remoting.tls import ClientTls

    async def main():
        # One client, one connection to each controller opened now; CONTROLLER_GET_STATE (read-only)
        # over each: the leader answers it, the standby with CONTROLLER_NOT_LEADER.
        client = RemotingClient(tls=ClientTls(insecure=True).context())
        one_round = await remoting_round(client, [
            (address, lambda: RemotingCommand.request(CONTROLLER_GET_STATE), {0, CONTROLLER_NOT_LEADER})
            for address in ARGS])
        await watch_renewal({address.split(".")[0]: address for address in ARGS}, one_round)
        await client.close()
    asyncio.run(main())
"""


def test_failover_controllers_serve_a_renewed_certificate_without_dropping_connections(ns, tools, tmp_path):
    fo, topic = "tls-failover", "tls-failover-orders"
    certs = make_test_certificates(tmp_path / "certs")
    kubectl("create", "secret", "tls", f"{fo}-tls", "-n", ns, f"--cert={certs['server_cert']}",
            f"--key={certs['server_key']}")
    apply(ns, {"apiVersion": API, "kind": "Broker", "metadata": {"name": fo},
               "spec": {"replicas": 1, "imagePullPolicy": "Never", "storage": {"size": "1Gi", "deleteClaim": True},
                        "replication": {"slavesPerGroup": 1, "mode": "Sync", "failover": True},
                        "tls": {"secretName": f"{fo}-tls"}}})
    wait_status("broker", fo, ns, lambda o: ready(o) and condition(o, "TlsReady").get("status") == "True" and [
        g["slavesReady"] for g in (o["status"].get("replication") or {}).get("groups", [])] == [1],
                "Ready with its slave", 600)
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": topic},
               "spec": {"brokerRef": {"name": fo}, "readQueueNums": 2, "writeQueueNums": 2}})
    wait_status("topic", topic, ns, ready, "Ready", 180)

    controllers = [f"{fo}-controller-0", f"{fo}-controller-1"]
    updated, on_disk, summary = renew_while_watching(
        ns, f"{fo}-tls", ns, controllers, tmp_path, CONTROLLER_RENEWAL_WATCH,
        *(f"{pod}.{fo}-controller.{ns}.svc:9878" for pod in controllers))
    print(renewal_line("failover controller", updated, on_disk, summary))
    assert set(summary["renewed_at"]) == set(controllers), summary
    assert summary["failures"] == 0 and not summary["reconnected"] and summary["requests"] > 20, summary

    # the group, whose brokers keep their own connections to the controllers, still takes sends
    sent = [json.loads(line) for line in run_job(ns, "produce-tls-failover", [
        "produce", "-n", f"{fo}-namesrv.{ns}.svc:9876", "-t", topic, "--count", "20", "--json"],
        env=[{"name": "FERRYMQ_TLS", "value": "true"}]).splitlines() if line.startswith("{")]
    assert len(sent) == 20 and {s["status"] for s in sent} == {"SEND_OK"}, sent
    kubectl("delete", "broker", fo, "-n", ns, "--timeout=300s")


# ------------------------------------------------------------------------------------------------
# 12. The chart's console over HTTPS: its Secret renewed in place, new connections get the new
#     certificate, a keep-alive connection opened before keeps answering

CONSOLE_RENEWAL_WATCH = RENEWAL_LOOP + """
    import http.client

    (console,) = ARGS
    host, port = console.rsplit(":", 1)

    async def main():
        # One keep-alive HTTPS connection, opened now: every GET /healthz goes over it.
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        connection = http.client.HTTPSConnection(host, int(port), timeout=5, context=context)
        connection.connect()
        first = connection.sock

        async def one_round():
            try:
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                failed = response.status != 200 or response.read().strip() != b"ok"
            except Exception as e:
                failed = True
                print(json.dumps({"error": repr(e)}), flush=True)
            return 1, int(failed), connection.sock is first
        await watch_renewal({"console": console}, one_round)
        connection.close()
    asyncio.run(main())
"""


def test_console_serves_a_renewed_https_certificate_without_dropping_connections(ns, tools, tmp_path):
    secret = "console-tls"
    certs = make_test_certificates(tmp_path / "certs")
    kubectl("create", "secret", "tls", secret, "-n", RELEASE_NS, f"--cert={certs['server_cert']}",
            f"--key={certs['server_key']}")
    values = tmp_path / "release-values.json"  # what run.sh installed, restored at the end
    values.write_text(helm("get", "values", RELEASE, "-n", RELEASE_NS, "-o", "json"))
    repository, tag = BROKER_IMAGE.rsplit(":", 1)
    helm("upgrade", RELEASE, CHART, "-n", RELEASE_NS, "--reuse-values", "--set", ",".join([
        "console.enabled=true", f"console.brokers[0].name={BROKER}", f"console.brokers[0].namespace={ns}",
        f"console.image.repository={repository}", f"console.image.tag={tag}", "console.image.pullPolicy=Never",
        f"console.https.secret={secret}", "console.https.reloadSeconds=10"]), "--wait", "--timeout", "300s")
    try:
        (pod,) = [p["metadata"]["name"] for p in items("pods", RELEASE_NS, "app.kubernetes.io/name=ferrymq-console")]
        updated, on_disk, summary = renew_while_watching(
            ns, secret, RELEASE_NS, [pod], tmp_path, CONSOLE_RENEWAL_WATCH,
            f"{RELEASE}-ferrymq-operator-console.{RELEASE_NS}.svc:80", mount="/etc/ferrymq/console-tls")
        print(renewal_line("console HTTPS", updated, on_disk, summary))
        assert set(summary["renewed_at"]) == {"console"}, summary
        assert summary["failures"] == 0 and not summary["reconnected"] and summary["requests"] > 20, summary
    finally:
        helm("upgrade", RELEASE, CHART, "-n", RELEASE_NS, "-f", str(values), "--wait", "--timeout", "300s")
        kubectl("delete", "secret", secret, "-n", RELEASE_NS, check=False)


def test_helm_upgrade_then_uninstall_leaves_only_kept_claims(ns, tools):
    before = {p["metadata"]["uid"] for p in operator_pods()}
    helm("upgrade", RELEASE, CHART, "-n", RELEASE_NS, "--reuse-values", "--set", "resyncSeconds=15", "--wait", "--timeout", "300s")
    dep = get("deployment", f"{RELEASE}-ferrymq-operator", RELEASE_NS)
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    assert env.get("FERRYMQ_RESYNC_SECONDS") == "15", env
    replicas = dep["spec"]["replicas"]  # the chart's two, one leading by a Lease
    poll_until("the upgraded operator pods", lambda: len([p for p in operator_pods() if p["metadata"]["uid"] not in before
                                                          and pod_ready(p)]) == replicas == len(operator_pods()), 300)
    # the CRDs are the release's (templates/crds.yaml): the upgrade applied them too
    for name in CRDS:
        annotations = get("crd", name, None)["metadata"]["annotations"]
        assert annotations["meta.helm.sh/release-name"] == RELEASE and annotations["helm.sh/resource-policy"] == "keep"
    # the upgraded operator still reconciles
    apply(ns, {"apiVersion": API, "kind": "Topic", "metadata": {"name": "after-upgrade"},
               "spec": {"brokerRef": {"name": BROKER}}})
    wait_status("topic", "after-upgrade", ns, ready, "Ready", 180)

    for kind in ("consumergroups", "topics", "brokers"):
        kubectl("delete", kind, "--all", "-n", ns, "--timeout=300s")
    poll_until("the brokers' pods gone", lambda: not items("pods", ns, "app.kubernetes.io/managed-by=ferrymq-operator"), 300)
    helm("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "300s")

    leftovers = []
    for kind in ("deployments", "statefulsets", "services", "configmaps", "poddisruptionbudgets", "cronjobs",
                 "serviceaccounts", "roles", "rolebindings"):
        for where in (ns, RELEASE_NS):
            for obj in items(kind, where):
                labels = obj["metadata"].get("labels") or {}
                if labels.get("app.kubernetes.io/managed-by") in ("ferrymq-operator", "Helm") or \
                        labels.get("app.kubernetes.io/instance") in (BROKER, "guarded", RELEASE):
                    leftovers.append(f"{kind}/{where}/{obj['metadata']['name']}")
    for kind in ("clusterroles", "clusterrolebindings"):
        leftovers += [f"{kind}/{o['metadata']['name']}" for o in json.loads(kubectl("get", kind, "-o", "json").stdout)["items"]
                      if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == RELEASE]
    assert leftovers == []
    # kept: the CRDs (and with them any resource left); run.sh's next install takes them back
    assert all(get("crd", name, None) is not None for name in CRDS)
    claims = sorted(p["metadata"]["name"] for p in items("pvc", ns))
    # demo: deleteClaim false (kept, including the scaled-away broker's); guarded: deleteClaim true.
    assert claims == ["data-demo-broker-0", "data-demo-broker-1", "drain-output"]
