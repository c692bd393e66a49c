"""ConsumerGroup on a real API server and real brokers: the group appears on every broker, lag
is reported, and when the brokers' own protection disables it, each policy does what it says."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time


from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from tests.k8s.conftest import CLUSTER
from testkit.wait import poll_until
from tests.k8s.test_operator import API, admin_call, broker_cr, condition, topic_cr, wait_status

def group_cr(name, policy="Disable", **spec) -> dict:
    return {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": name},
            "spec": {"brokerRef": {"name": CLUSTER}, "protection": {"onFallBehind": policy}, **spec}}


def enabled_on_brokers(ferry_cluster, group: str) -> dict[str, bool]:
    async def fn(admin):
        out = {}
        for name, addr in (await admin.master_addrs(CLUSTER)).items():
            g = (await admin.group_configs(addr)).get(group)
            if g is not None:
                out[name] = g.consume_enable
        return out
    return admin_call(ferry_cluster, fn)


def fall_behind(ferry_cluster, topic: str, group: str) -> None:
    """Write ~4 KiB to queue 0 on broker 0 and let ``group`` read one message of it: its
    fall-behind is then far above the brokers' 1 KiB threshold and their protection task
    disables the group."""
    async def go():
        mq = MessageQueue(topic, f"{CLUSTER}-broker-0", 0)
        async with Producer("lag-producer", namesrv_addr=ferry_cluster.namesrv_addr) as producer:
            for i in range(20):
                await producer.send(Message(topic, b"x" * 200), queue=mq)
        async with PullConsumer(group, namesrv_addr=ferry_cluster.namesrv_addr) as consumer:
            result = await consumer.pull(mq, 0, max_nums=1)
            assert result.messages, result
            await consumer.commit(mq, 1)
    asyncio.run(go())


def setup(cp, ns, topic, group, policy):
    cp.apply([broker_cr(), topic_cr(topic, readQueueNums=1, writeQueueNums=1), group_cr(group, policy)], ns)
    wait_status(cp, "topic", topic, ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True", "Ready")
    g = wait_status(cp, "consumergroup", group, ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True"
                    and o["status"].get("consumeEnabled") is True, "Ready")
    assert (condition(g, "ConsumeDisabled") or {}).get("status") == "False"


def events(cp, ns, name) -> list[dict]:
    items = cp.get("events", None, ns)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def test_group_on_every_broker_with_lag_and_disable_policy(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    setup(cp, ns, "lagging", "slowpoke", "Disable")
    assert enabled_on_brokers(ferry_cluster, "slowpoke") == {f"{CLUSTER}-broker-0": True, f"{CLUSTER}-broker-1": True}
    fall_behind(ferry_cluster, "lagging", "slowpoke")
    g = wait_status(cp, "consumergroup", "slowpoke", ns, lambda o: (condition(o, "ConsumeDisabled") or {}).get("status") == "True",
                    "ConsumeDisabled", 60)
    cond = condition(g, "ConsumeDisabled")
    assert cond["reason"] == "BrokerProtection" and f"{CLUSTER}-broker-0" in cond["message"]
    assert g["status"]["consumeEnabled"] is False
    assert g["status"]["lag"] == [{"topic": "lagging", "messages": 19}] and g["status"]["totalLag"] == 19
    # Disable: the operator does not fight the broker. Several resyncs later it is still off.
    first = [e for e in events(cp, ns, "slowpoke") if e["reason"] == "ConsumeDisabled"]
    assert len(first) == 1
    mark = operator_logs.log.stat().st_size
    poll_until("two more resyncs", lambda: _resyncs_since(operator_logs.log, mark, f"[{ns}/slowpoke] Timer 'consumergroups-resync' succeeded") >= 2, 30)
    assert enabled_on_brokers(ferry_cluster, "slowpoke")[f"{CLUSTER}-broker-0"] is False
    assert len([e for e in events(cp, ns, "slowpoke") if e["reason"] == "ConsumeDisabled"]) == 1, "events on transitions only"
    # a person re-enables it with the one-shot annotation
    cp.kubectl("annotate", "consumergroup", "slowpoke", "-n", ns, "ferrymq.io/enable-consume=true")
    g = wait_status(cp, "consumergroup", "slowpoke", ns, lambda o: o["status"].get("consumeEnabled") is True
                    and "ferrymq.io/enable-consume" not in (o["metadata"].get("annotations") or {}), "re-enabled", 60)
    assert (condition(g, "ConsumeDisabled") or {})["status"] == "False"
    assert set(enabled_on_brokers(ferry_cluster, "slowpoke").values()) == {True}


def _resyncs_since(log, offset: int, line: str) -> int:
    """How often the operator's resync timer finished for the group since ``offset`` of its log."""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").count(line)


def test_reset_to_latest_skips_the_backlog_and_re_enables(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    setup(cp, ns, "skippy", "skipper", "ResetToLatest")
    fall_behind(ferry_cluster, "skippy", "skipper")
    g = wait_status(cp, "consumergroup", "skipper", ns, lambda o: (condition(o, "ConsumeDisabled") or {}).get("reason") == "BacklogSkipped"
                    and o["status"].get("consumeEnabled") is True, "BacklogSkipped", 60)
    assert condition(g, "ConsumeDisabled")["status"] == "False"
    assert any(e["reason"] == "BacklogSkipped" for e in events(cp, ns, "skipper"))
    wait_status(cp, "consumergroup", "skipper", ns, lambda o: o["status"].get("totalLag") == 0, "lag 0 after the reset", 60)


def test_alert_keeps_consuming_and_reports(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    setup(cp, ns, "alerty", "alerter", "Alert")
    fall_behind(ferry_cluster, "alerty", "alerter")
    poll_until("FallingBehind event", lambda: any(e["reason"] == "FallingBehind" for e in events(cp, ns, "alerter")), 60)
    g = wait_status(cp, "consumergroup", "alerter", ns, lambda o: o["status"].get("consumeEnabled") is True, "enabled", 60)
    assert (condition(g, "ConsumeDisabled") or {}).get("status") == "False"
    assert set(enabled_on_brokers(ferry_cluster, "alerter").values()) == {True}
    assert g["status"]["totalLag"] == 19


def test_spec_disable_and_group_delete(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    setup(cp, ns, "togglet", "toggler", "Disable")
    cp.kubectl("patch", "consumergroup", "toggler", "-n", ns, "--type=merge", "-p", '{"spec":{"consumeEnable":false}}')
    g = wait_status(cp, "consumergroup", "toggler", ns, lambda o: (condition(o, "ConsumeDisabled") or {}).get("reason") == "DisabledInSpec",
                    "DisabledInSpec", 60)
    assert set(enabled_on_brokers(ferry_cluster, "toggler").values()) == {False}
    cp.kubectl("delete", "consumergroup", "toggler", "-n", ns, "--timeout=60s")
    assert enabled_on_brokers(ferry_cluster, "toggler") == {}
    assert json.dumps(g)  # status was a full object


def test_a_group_deleted_while_its_resync_runs_goes_away_promptly(control_plane, operator_logs, ferry_cluster, namespace):
    """kopf lets a resource's running timers finish before its delete handlers run and, unless
    another event comes, looked again only after 60 s: `kubectl delete` of a group whose resync
    was running (and then changed nothing) hung for a minute (seen in CI). Here broker-0 is
    frozen (SIGSTOP) for 2.8 s, so the group's resync (every 2 s here) has surely started and
    waits for it when the deletion comes, and then finishes normally (admin timeout 3 s)."""
    cp, ns = control_plane, namespace
    setup(cp, ns, "churnt", "churner", "Alert")
    broker0 = ferry_cluster.processes[1].proc
    kubectl = [str(cp.bin / "kubectl"), f"--kubeconfig={cp.kubeconfig}"]
    broker0.send_signal(signal.SIGSTOP)
    try:
        time.sleep(2.3)
        started = time.monotonic()
        deleting = subprocess.Popen([*kubectl, "delete", "consumergroup", "churner", "-n", ns, "--timeout=40s"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
    finally:
        broker0.send_signal(signal.SIGCONT)
    out, _ = deleting.communicate(timeout=60)
    # kubectl gives up after 40 s: kopf's default 60 s re-check would make it fail
    assert deleting.returncode == 0, f"after {time.monotonic() - started:.0f} s: {out}"
    assert enabled_on_brokers(ferry_cluster, "churner") == {}


def test_scale_down_waits_until_the_leaving_broker_is_drained(control_plane, operator_logs, ferry_cluster, namespace):
    cp, ns = control_plane, namespace
    setup(cp, ns, "drainme", "drainer", "Alert")
    wait_status(cp, "broker", CLUSTER, ns, lambda o: o.get("status", {}).get("phase") == "Ready", "Ready", 120)
    leaving = f"{CLUSTER}-broker-1"
    mq = MessageQueue("drainme", leaving, 0)

    async def backlog_on_leaving():
        async with Producer("drain-producer", namesrv_addr=ferry_cluster.namesrv_addr) as producer:
            for _ in range(3):
                await producer.send(Message("drainme", b"payload"), queue=mq)
        async with PullConsumer("drainer", namesrv_addr=ferry_cluster.namesrv_addr) as consumer:
            await consumer.commit(mq, 0)
    asyncio.run(backlog_on_leaving())
    addr = admin_call(ferry_cluster, lambda a: a.master_addrs(CLUSTER))[leaving]
    try:
        cp.kubectl("scale", "broker", CLUSTER, "-n", ns, "--replicas=1")  # through the scale subresource
        b = wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "ScaleDownBlocked") or {}).get("status") == "True",
                        "ScaleDownBlocked", 60)
        assert f"{leaving} holds 3 unconsumed message(s)" in condition(b, "ScaleDownBlocked")["message"]
        assert b["status"]["phase"] == "ScaleDownBlocked" and b["status"]["replicas"] == 2
        assert cp.get("statefulset", f"{CLUSTER}-broker", ns)["spec"]["replicas"] == 2
        assert admin_call(ferry_cluster, lambda a: a.broker_config(addr))["brokerPermission"] == "4", "drain: write revoked"
        assert any(e["reason"] == "ScaleDownBlockedTrue" and e["type"] == "Warning" for e in events(cp, ns, CLUSTER))

        async def consume_all():
            async with PullConsumer("drainer", namesrv_addr=ferry_cluster.namesrv_addr) as consumer:
                await consumer.commit(mq, 3)
        asyncio.run(consume_all())
        b = wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "ScaleDownBlocked") or {}).get("status") == "False"
                        and o["status"].get("phase") == "Ready" and o["status"].get("readyReplicas") == 1, "scaled down", 90)
        assert cp.get("statefulset", f"{CLUSTER}-broker", ns)["spec"]["replicas"] == 1
        assert cp.get("pvc", f"data-{leaving}", ns) is not None, "PVCs are never deleted on scale-down"
    finally:
        admin_call(ferry_cluster, lambda a: a.update_broker_config(addr, {"brokerPermission": "6"}))
