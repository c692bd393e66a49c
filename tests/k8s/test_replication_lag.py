"""Replication lag on a real API server: status.replication shows each slave's lag as its
master reports it, and a rolling restart never restarts a master whose slave is behind
(MasterRestartBlocked says so) - it goes on once the slave caught up. Real FerryMQ master
and slave processes stand in for the fake pods; pausing a slave process (SIGSTOP) makes it
fall behind while its master keeps taking messages."""

from __future__ import annotations

import asyncio
import os
import signal

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.common.message import Message
from tests.k8s.conftest import CLUSTER
from tests.k8s.test_operator import broker_cr, condition, wait_status
from tests.k8s.test_replication import broker_pods, ready
from testkit.wait import poll_until

TOPIC = "LagGateTopic"


async def send_to(namesrv: str, broker_name: str, count: int) -> None:
    """``count`` messages to ``broker_name`` alone (the topic lives only there)."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        addr = (await admin.master_addrs(CLUSTER))[broker_name]
        await admin.create_topic(TOPIC, read_queues=1, write_queues=1, broker_addr=addr)
    producer = Producer("lag-gate-producer", namesrv_addr=namesrv)
    await producer.start()
    try:
        for i in range(count):
            assert (await producer.send(Message(TOPIC, b"behind-%d" % i))).status is SendStatus.SEND_OK
    finally:
        await producer.close()


def group(broker: dict, name: str) -> dict:
    return next(g for g in broker["status"]["replication"]["groups"] if g["brokerName"] == name)


def test_a_master_is_restarted_only_once_its_slave_caught_up(control_plane, operator_logs, namespace, ferry_cluster,
                                                              ferry_slaves):
    cp, ns = control_plane, namespace
    master0, master1, slave1 = f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1", f"{CLUSTER}-broker-s1-1"
    cp.apply(broker_cr(replicas=2, replication={"slavesPerGroup": 1, "maxRestartLagBytes": "0"}), ns)
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: o["status"].get("phase") == "Ready"
                         and all(g.get("inSync") for g in (o["status"].get("replication") or {}).get("groups", [{}])),
                         "Ready with its slaves in sync", 180)
    assert group(broker, master1)["slaves"][0]["lagBytes"] == 0
    assert group(broker, master1)["slaves"][0]["lagSeconds"] == 0

    # The slave of the second group stops acknowledging; its master keeps taking messages.
    os.kill(ferry_slaves[master1].proc.pid, signal.SIGSTOP)
    asyncio.run(send_to(ferry_cluster.namesrv_addr, master1, 20))
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: group(o, master1).get("inSync") is False,
                         "showing the second group out of sync", 60)
    lagging = group(broker, master1)["slaves"][0]
    assert lagging.get("lagBytes", 1) > 0  # behind, or (once its master gave up on it) unknown
    assert group(broker, master0)["inSync"] is True

    # A config change: both slaves restart, the master whose slave is level too; not the other.
    before = {n: p["metadata"]["uid"] for n, p in broker_pods(cp, ns).items()}
    cp.kubectl("patch", "broker", CLUSTER, "-n", ns, "--type=merge", "-p",
               '{"spec":{"config":{"flushDiskType":"SYNC_FLUSH"}}}')

    def restarted(name: str, pods: dict) -> bool:
        return name in pods and pods[name]["metadata"]["uid"] != before[name] and ready(pods[name])

    def held_back():
        pods = broker_pods(cp, ns)
        obj = cp.get("broker", CLUSTER, ns)
        blocked = condition(obj, "MasterRestartBlocked") or {}
        if all(restarted(n, pods) for n in (f"{CLUSTER}-broker-s1-0", slave1, master0)) and blocked.get("status") == "True":
            return pods, blocked
        return None

    pods, blocked = poll_until("the second master held back while the others restarted", held_back, 180)
    assert pods[master1]["metadata"]["uid"] == before[master1]
    assert blocked["reason"] in ("SlaveBehind", "SlaveLagUnknown")
    assert f"restart of master {master1} waits for its slaves" in blocked["message"] and slave1 in blocked["message"]
    assert "waits for its slaves" in condition(cp.get("broker", CLUSTER, ns), "Restarting")["message"]
    events = cp.kubectl("get", "events", "-n", ns, "--field-selector", "reason=MasterRestartBlockedTrue", "-o",
                        "jsonpath={.items[*].message}").stdout
    assert f"restart of master {master1} waits" in events

    # The slave resumes, catches up, and only then is its master restarted.
    os.kill(ferry_slaves[master1].proc.pid, signal.SIGCONT)
    poll_until("the second master restarted once its slave caught up",
               lambda: restarted(master1, broker_pods(cp, ns)), 120)
    broker = wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "MasterRestartBlocked") or {}).get("status")
                         == "False" and (condition(o, "Restarting") or {}).get("status") == "False",
                         "restarted, nothing blocked", 60)
    assert group(broker, master1)["inSync"] is True
