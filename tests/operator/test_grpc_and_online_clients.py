"""spec.grpc (RocketMQ 5 clients) as the operator renders it - broker.conf, container ports,
the brokers' Services, refusals - and a ConsumerGroup's status.onlineClients by protocol, from
the connection list a broker answers (issue 17 item 3)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import yaml

from ferrymq.client.admin import AdminClient
from ferrymq.common.consumer_protocol import ConsumerConnection
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from ferrymq_operator import groups, manifests
from ferrymq_operator.model import BrokerCluster
from tests.support import InProcessCluster

REPO = Path(__file__).resolve().parents[2]


def cluster(**spec) -> BrokerCluster:
    return BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod", "uid": "u1"},
                                        "spec": {"replicas": 2, **spec}})


def conf(c: BrokerCluster) -> str:
    return manifests.config_map(c)["data"]["broker.conf"]


def container_ports(sts: dict) -> list[tuple[str, int]]:
    return [(p["name"], p["containerPort"]) for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]]


def test_grpc_on_renders_the_port_into_conf_containers_and_services():
    c = cluster(grpc={"enabled": True}, replication={"slavesPerGroup": 1})
    assert "grpcListenPort=8081\n" in conf(c)
    for sts in (manifests.broker_statefulset(c), manifests.slave_statefulset(c, 1)):
        assert container_ports(sts) == [("broker", 10911), ("http", 8080), ("ha", 10912), ("grpc", 8081)]
    for svc in (manifests.broker_headless_service(c), manifests.slave_headless_service(c, 1)):
        assert svc["spec"]["ports"] == [{"name": "broker", "port": 10911, "targetPort": "broker"},
                                        {"name": "grpc", "port": 8081, "targetPort": "grpc"}]
    assert manifests.broker_conf_error(c) is None
    custom = cluster(grpc={"enabled": True, "port": 18081})
    assert "grpcListenPort=18081\n" in conf(custom)
    assert ("grpc", 18081) in container_ports(manifests.broker_statefulset(custom))


def test_grpc_off_or_absent_changes_nothing_so_upgrades_restart_no_broker():
    plain = cluster()
    for c in (cluster(grpc={"enabled": False, "port": 9000}), cluster(grpc={})):
        assert "grpcListenPort" not in conf(c)
        assert container_ports(manifests.broker_statefulset(c)) == [("broker", 10911), ("http", 8080)]
        assert manifests.broker_headless_service(c)["spec"]["ports"] == [
            {"name": "broker", "port": 10911, "targetPort": "broker"}]
        assert manifests.config_hash(c) == manifests.config_hash(plain)
    assert manifests.config_hash(cluster(grpc={"enabled": True})) != manifests.config_hash(plain)


@pytest.mark.parametrize("spec, message", [
    ({"grpc": {"enabled": True, "port": 10911}}, "spec.grpc.port 10911 is the broker port"),
    ({"grpc": {"enabled": True, "port": 9090}, "httpPort": 9090}, "spec.grpc.port 9090 is spec.httpPort"),
    ({"grpc": {"enabled": True}, "config": {"grpcListenPort": "9000"}},
     "spec.config.grpcListenPort and spec.grpc both set the gRPC port"),
])
def test_grpc_port_clashes_are_refused_before_anything_is_applied(spec, message):
    assert message in manifests.broker_conf_error(cluster(**spec))


def test_crd_declares_spec_grpc_with_defaults_and_port_validation():
    for path in (REPO / "crds" / "ferrymq.io_brokers.yaml",
                 REPO / "charts" / "ferrymq-operator" / "files" / "crds" / "ferrymq.io_brokers.yaml"):
        version = yaml.safe_load(path.read_text())["spec"]["versions"][0]
        grpc = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["grpc"]
        assert grpc["properties"]["enabled"]["default"] is False and grpc["properties"]["port"]["default"] == 8081
        assert (grpc["properties"]["port"]["minimum"], grpc["properties"]["port"]["maximum"]) == (1, 65535)
        assert "10911" in grpc["x-kubernetes-validations"][0]["rule"] and grpc["description"]
    group = yaml.safe_load((REPO / "crds" / "ferrymq.io_consumergroups.yaml").read_text())["spec"]["versions"][0]
    assert "onlineClients" in group["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {c["name"]: c["jsonPath"] for c in group["additionalPrinterColumns"]}["Clients"] == ".status.onlineClients.total"


def test_online_clients_status_counts_each_protocol_from_the_brokers_answer():
    # as a FerryMQ broker answers GET_CONSUMER_CONNECTION_LIST (and a RocketMQ one, naming no protocol)
    answer = ConsumerConnection.from_json(
        b'{"connectionSet":[{"clientId":"a","clientAddr":"10.0.0.1:1","language":"JAVA","version":0,'
        b'"protocol":"gRPC v2","clientVersion":"5.0.7"},{"clientId":"b","clientAddr":"10.0.0.2:2",'
        b'"language":"JAVA","version":0,"protocol":"gRPC v2"},{"clientId":"10.0.0.3:3","clientAddr":"10.0.0.3:3",'
        b'"language":"OTHER","version":0,"protocol":"POP"},{"clientId":"c","clientAddr":"10.0.0.4:4",'
        b'"language":"JAVA","version":453}],"subscriptionTable":{},"consumeType":"CONSUME_PASSIVELY"}')
    assert groups.online_clients(answer) == {"total": 4, "byProtocol": [
        {"protocol": "remoting", "clients": 1}, {"protocol": "gRPC v2", "clients": 2}, {"protocol": "POP", "clients": 1}]}
    assert groups.online_clients(None) == {"total": 0, "byProtocol": [
        {"protocol": "remoting", "clients": 0}, {"protocol": "gRPC v2", "clients": 0}, {"protocol": "POP", "clients": 0}]}


@pytest.mark.integration
async def test_online_clients_status_from_a_real_broker_with_a_grpc_consumer(tmp_path):
    """What reconcile_group writes to status.onlineClients, from a broker a 5.x consumer heartbeats to."""
    c = await InProcessCluster(tmp_path / "b", settings={"grpcListenPort": 0}).start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            beat = await rpc.MessagingServiceStub(channel).Heartbeat(
                spb.HeartbeatRequest(group=pb.Resource(name="status-g"), client_type=pb.ClientType.PUSH_CONSUMER),
                metadata=(("x-mq-client-id", "push@pod-1"), ("x-mq-language", "JAVA")), timeout=5)
            assert beat.status.code == Code.OK
        async with AdminClient(namesrv_addr=c.namesrv_addr) as admin:
            online = groups.online_clients(await admin.consumer_connections("status-g", cluster=c.broker.config.broker_cluster_name))
            nobody = groups.online_clients(await admin.consumer_connections("nobody-g"))
        assert online["total"] == 1 and {"protocol": "gRPC v2", "clients": 1} in online["byProtocol"]
        assert nobody["total"] == 0
    finally:
        await c.stop()
