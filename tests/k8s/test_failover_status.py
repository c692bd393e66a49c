"""After a real failover the operator follows the master the group actually has. A real
``ferrymq controller`` and two real brokers in controller mode (brokerName fo-broker-0, the
configured brokerIds of pods fo-broker-0 and fo-broker-s1-0) stand in for the Broker ``fo``'s
fake pods. The master's process is killed: the controller promotes the slave, and the Broker's
status then names pod fo-broker-s1-0 as master (brokerId 0, epoch 2, lastMasterChange, an Event
MasterChanged from fo-broker-0 to fo-broker-s1-0). The old master, back, follows it and shows
as its slave. A rolling restart then takes fo-broker-0 (now a slave) first and holds back
fo-broker-s1-0, the actual master, while its slave is behind."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from testkit.failover import FailoverPair, controller_state
from tests.k8s.test_operator import API, condition, wait_status
from tests.k8s.test_replication import broker_pods, ready
from testkit.wait import poll_until

NAME = "fo"  # its own RocketMQ cluster on the shared name server (the other tests' brokers are "demo")
GROUP = f"{NAME}-broker-0"
OLD, NEW = f"{NAME}-broker-0", f"{NAME}-broker-s1-0"
TOPIC = "FailoverStatusTopic"


@pytest.fixture
def real_group(ferry_cluster, tmp_path):
    """Controller + two brokers of group fo-broker-0 in controller mode, registered with the
    name server the operator's admin calls reach."""
    pair = FailoverPair(tmp_path, "ASYNC_MASTER", [f"brokerName={GROUP}", f"brokerClusterName={NAME}",
                                                    "mappedFileSizeCommitLog=4194304"], failover_timeout=3000)
    pair.namesrv_port = int(ferry_cluster.namesrv_addr.rpartition(":")[2])
    try:
        pair.start_controller()
        pair.start_master()
        pair.start_slave()
        yield pair
    finally:
        for p in pair.processes.values():
            if p.proc and p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
        print(pair.logs())  # shown when the test failed
        pair.stop_all()


def broker_cr() -> dict:
    return {"apiVersion": API, "kind": "Broker", "metadata": {"name": NAME},
            "spec": {"replicas": 1, "image": "ferrymq/broker:test", "storage": {"size": "1Gi"},
                     "replication": {"slavesPerGroup": 1, "mode": "Async", "failover": True,
                                     "failoverTimeoutSeconds": 3, "maxRestartLagBytes": "0"}}}


def group(obj: dict) -> dict:
    return next(g for g in ((obj.get("status") or {}).get("replication") or {}).get("groups", [])
                if g["brokerName"] == GROUP)


def master_is(pod: str, **more):
    def check(obj: dict) -> bool:
        g = group(obj)
        return g["rolesObserved"] and g["master"]["pod"] == pod and all(g.get(k) == v for k, v in more.items())
    return check


async def send(namesrv: str, count: int) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        addr = (await admin.master_addrs(NAME))[GROUP]
        await admin.create_topic(TOPIC, read_queues=1, write_queues=1, broker_addr=addr)
    producer = Producer("failover-status-producer", namesrv_addr=namesrv)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(Message(TOPIC, b"after-failover-%d" % i))
    finally:
        await producer.close()


def test_after_a_failover_the_status_and_the_restart_order_follow_the_promoted_master(
        control_plane, operator_logs, namespace, ferry_cluster, real_group):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(), ns)
    broker = wait_status(cp, "broker", NAME, ns, lambda o: o["status"].get("phase") == "Ready" and master_is(OLD)(o)
                         and group(o).get("inSync"), "Ready, showing the first master, its slave in sync", 180)
    g = group(broker)
    assert g["master"] == {"pod": OLD, "brokerId": 0, "ready": True} and g["epoch"] == 1
    assert [s["pod"] for s in g["slaves"]] == [NEW] and g["slaves"][0]["brokerId"] == 1

    # Only a member of the controller's in-sync set can be promoted: wait until the slave is one.
    poll_until("the slave in the controller's in-sync set",
               lambda: asyncio.run(controller_state(real_group.controller, GROUP)).get("inSync") == [1], 60)
    # The master's process dies; the controller promotes the slave (brokerId 1, pod fo-broker-s1-0).
    real_group.processes["master"].kill()
    broker = wait_status(cp, "broker", NAME, ns, master_is(NEW, epoch=2), "naming the promoted pod as master", 120)
    g = group(broker)
    assert g["master"]["brokerId"] == 0  # it serves as brokerId 0 now
    assert g["lastMasterChange"]["from"] == OLD and g["lastMasterChange"]["to"] == NEW
    assert g["lastMasterChange"]["epoch"] == 2 and g["lastObservedMaster"] == NEW
    events = poll_until("the MasterChanged event", lambda: cp.kubectl(
        "get", "events", "-n", ns, "--field-selector", "reason=MasterChanged", "-o",
        "jsonpath={.items[*].message}").stdout, 30)
    assert f"master moved from pod {OLD} to pod {NEW} (epoch 2)" in events

    # The old master comes back: it truncates, follows the new master and shows as its slave.
    real_group.start_master()
    broker = wait_status(cp, "broker", NAME, ns, lambda o: master_is(NEW)(o) and group(o).get("inSync"),
                         "showing the old master's pod as the new master's slave, in sync", 120)
    (slave,) = group(broker)["slaves"]
    assert slave["pod"] == OLD and slave["brokerId"] == 1 and slave["lagBytes"] == 0

    # Its process stops acknowledging while the new master takes messages: a config change
    # restarts fo-broker-0 (a slave now) and holds back fo-broker-s1-0 (the master).
    os.kill(real_group.processes["master"].proc.pid, signal.SIGSTOP)
    asyncio.run(send(ferry_cluster.namesrv_addr, 20))
    before = {n: p["metadata"]["uid"] for n, p in broker_pods(cp, ns).items()}
    cp.kubectl("patch", "broker", NAME, "-n", ns, "--type=merge", "-p",
               '{"spec":{"config":{"flushDiskType":"SYNC_FLUSH"}}}')

    def restarted(name: str, pods: dict) -> bool:
        return name in pods and pods[name]["metadata"]["uid"] != before[name] and ready(pods[name])

    def held_back():
        pods = broker_pods(cp, ns)
        blocked = condition(cp.get("broker", NAME, ns), "MasterRestartBlocked") or {}
        return (pods, blocked) if restarted(OLD, pods) and blocked.get("status") == "True" else None

    pods, blocked = poll_until("the old master's pod restarted, the promoted master held back", held_back, 120)
    assert pods[NEW]["metadata"]["uid"] == before[NEW]
    assert blocked["reason"] in ("SlaveBehind", "SlaveLagUnknown")
    assert f"restart of master {NEW} waits for its slaves" in blocked["message"] and OLD in blocked["message"]

    # The slave resumes and catches up: only then is the actual master's pod restarted.
    os.kill(real_group.processes["master"].proc.pid, signal.SIGCONT)
    poll_until("the promoted master's pod restarted once its slave caught up",
               lambda: restarted(NEW, broker_pods(cp, ns)), 120)
    wait_status(cp, "broker", NAME, ns, lambda o: (condition(o, "Restarting") or {}).get("status") == "False",
                "restarted, nothing left", 60)
