"""The name-server and broker container commands the manifests build really start FerryMQ:
run them as processes (the pod's $(VAR)s, ports and paths mapped to this machine) and check
that the readiness probe's /readyz answers 200, as the kubelet would require."""

from __future__ import annotations

import re
import urllib.request

import pytest

from ferrymq_operator import manifests
from ferrymq_operator.model import BrokerCluster
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import poll_until

pytestmark = pytest.mark.integration


def localise(args: list[str], env: dict[str, str], ports: dict[str, int], paths: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        a = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a)
        for old, new in {**{str(k): str(v) for k, v in ports.items()}, **paths}.items():
            a = a.replace(old, new)
        out.append(a)
    return out


def probe(port: int, path: str) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
        return r.status == 200


def test_namesrv_and_broker_commands_become_ready(tmp_path):
    broker = BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod"},
                                          "spec": {"replicas": 1, "httpPort": 18080}})
    ns_port, broker_port, ns_http, broker_http = free_port(), free_port(), free_port(), free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(manifests.config_map(broker)["data"]["broker.conf"].replace("/data/store", str(tmp_path / "store")))

    ns_container = manifests.namesrv_statefulset(broker)["spec"]["template"]["spec"]["containers"][0]
    ns_args = localise(ns_container["args"], {}, {9876: ns_port, 18080: ns_http}, {"0.0.0.0": "127.0.0.1"})
    namesrv = FerryProcess(ns_args, "name server is ready", tmp_path / "namesrv.log").start()
    try:
        b_container = manifests.broker_statefulset(broker)["spec"]["template"]["spec"]["containers"][0]
        b_args = localise(b_container["args"], {"POD_NAME": "demo-broker-0", "POD_NAMESPACE": "prod"},
                          {10911: broker_port, 18080: broker_http},
                          {"0.0.0.0": "127.0.0.1", "demo-namesrv-0.demo-namesrv-headless.prod.svc:9876": f"localhost:{ns_port}",
                           "/etc/ferrymq/broker.conf": str(conf), "/data/store": str(tmp_path / "store"),
                           # the pod's own DNS name; here the loopback name resolves the same way
                           "demo-broker-0.demo-broker-headless.prod.svc": "localhost"})
        assert "brokerName=demo-broker-0" in b_args
        proc = FerryProcess(b_args, "is ready", tmp_path / "broker.log").start()
        try:
            probes = {k: b_container[k]["httpGet"]["path"] for k in ("livenessProbe", "readinessProbe")}
            assert probes == {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
            poll_until("broker /readyz", lambda: probe(broker_http, "/readyz"), 30, diagnostics=proc.log)
            assert probe(broker_http, "/healthz") and probe(ns_http, "/readyz")
        finally:
            proc.stop()
    finally:
        namesrv.stop()


def test_master_and_slave_pod_commands_replicate(tmp_path):
    """spec.replication's pods as processes: the slave (brokerName from its pod index, brokerId
    1, SLAVE) reaches its master's HA port by the master pod's DNS name and copies what is sent;
    the slave starts first, as it may in a cluster."""
    import asyncio

    from ferrymq.client.admin import AdminClient
    from ferrymq.client.producer import Producer
    from ferrymq.common.message import Message

    broker = BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod"},
                                          "spec": {"replicas": 1, "httpPort": 18080,
                                                   "replication": {"slavesPerGroup": 1, "mode": "Sync"}}})
    ns_port, ns_http = free_port(), free_port()
    ns_container = manifests.namesrv_statefulset(broker)["spec"]["template"]["spec"]["containers"][0]
    ns_args = localise(ns_container["args"], {}, {9876: ns_port, 18080: ns_http},
                       {"0.0.0.0": "127.0.0.1", "demo-namesrv-headless.prod.svc": "localhost"})
    namesrv = FerryProcess(ns_args, "name server is ready", tmp_path / "namesrv.log").start()
    procs = []
    try:
        master_ha = free_port()
        for sts, pod, index in ((manifests.slave_statefulset(broker, 1), "demo-broker-s1-0", "0"),
                                (manifests.broker_statefulset(broker), "demo-broker-0", "0")):
            port, http = free_port(), free_port()
            ha = master_ha if pod == "demo-broker-0" else free_port()
            store = tmp_path / pod / "store"
            conf = tmp_path / pod / "broker.conf"
            conf.parent.mkdir()
            conf.write_text(manifests.config_map(broker)["data"]["broker.conf"]
                            .replace("/data/store", str(store)).replace("haListenPort=10912", f"haListenPort={ha}"))
            container = sts["spec"]["template"]["spec"]["containers"][0]
            args = localise(container["args"], {"POD_NAME": pod, "POD_NAMESPACE": "prod", "POD_INDEX": index},
                            {10911: port, 18080: http, 10912: master_ha},
                            {"0.0.0.0": "127.0.0.1", "demo-nsaddr.prod.svc:8080": f"localhost:{ns_http}",
                             "/etc/ferrymq/broker.conf": str(conf), "/data/store": str(store),
                             f"{pod}.{sts['spec']['serviceName']}.prod.svc": "localhost",
                             "demo-broker-0.demo-broker-headless.prod.svc": "localhost"})
            procs.append(FerryProcess(args, "is ready", tmp_path / f"{pod}.log").start())

        async def scenario():
            namesrv_addr = f"127.0.0.1:{ns_port}"
            async with AdminClient(namesrv_addr=namesrv_addr) as admin:
                async def both_registered():
                    group = (await admin.cluster_info()).broker_addr_table.get("demo-broker-0")
                    return group is not None and set(group.broker_addrs) >= {0, 1}
                await asyncio.wait_for(_until(both_registered), 60)
                master = (await admin.cluster_info()).broker_addr_table["demo-broker-0"].broker_addrs[0]
                await admin.create_topic("Replicated", read_queues=2, write_queues=2, broker_addr=master)
            async with Producer("pods", namesrv_addr=namesrv_addr) as producer:
                # SLAVE_NOT_AVAILABLE until the slave has connected (it retries every <= 5 s, as RocketMQ's)
                async def slave_connected():
                    return (await producer.send(Message("Replicated", b"probe"))).status.name == "SEND_OK"
                await asyncio.wait_for(_until(slave_connected), 30)
                for i in range(20):  # SYNC_MASTER: each answered once the slave has it
                    assert (await producer.send(Message("Replicated", b"m%d" % i))).status.name == "SEND_OK"
        asyncio.run(scenario())
        slave_store = tmp_path / "demo-broker-s1-0" / "store" / "commitlog"
        master_store = tmp_path / "demo-broker-0" / "store" / "commitlog"
        poll_until("the slave's CommitLog equals the master's",
                   lambda: _commitlog(slave_store) == _commitlog(master_store) != b"", 30, diagnostics=procs[0].log)
    finally:
        for p in reversed(procs):
            p.stop()
        namesrv.stop()


async def _until(pred, interval=0.2):
    import asyncio
    while not await pred():
        await asyncio.sleep(interval)


def _commitlog(directory) -> bytes:
    files = sorted(directory.iterdir()) if directory.exists() else []
    return b"".join(f.read_bytes().rstrip(b"\0") for f in files)
