"""The name-server and broker container commands the manifests build really start FerryMQ:
run them as processes (the pod's $(VAR)s, ports and paths mapped to this machine) and check
that the readiness probe's /readyz answers 200, as the kubelet would require."""

from __future__ import annotations

import re
import urllib.request

import pytest

from ferrymq_operator import manifests
from ferrymq_operator.model import BrokerCluster
from tests.support import FerryProcess, free_port, poll_until

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
