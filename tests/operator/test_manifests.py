"""Every manifest builder: names, labels, owner references, security, probes, storage."""

from __future__ import annotations

import copy

import pytest

from ferrymq_operator import manifests
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.constants import ANN_CONFIG_HASH, ANN_RESTART, BROKER_PORT, NAMESRV_PORT
from ferrymq_operator.quantity import to_bytes


def resource(annotations: dict | None = None, **spec) -> dict:
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": "Broker",
            "metadata": {"name": "demo", "namespace": "prod", "uid": "u-1", "generation": 3,
                         "annotations": annotations or {}},
            "spec": {"replicas": 3, "image": "ferrymq/broker:1", **spec}}


def broker(**spec) -> BrokerCluster:
    return BrokerCluster.from_resource(resource(**spec))


def test_names_and_namesrv_addresses():
    n = broker().names
    assert (n.config_map, n.namesrv, n.namesrv_headless, n.broker_sts, n.broker_headless) == (
        "demo-config", "demo-namesrv", "demo-namesrv-headless", "demo-broker", "demo-broker-headless")
    assert n.broker_pod(2) == "demo-broker-2"
    assert n.namesrv_addresses(2) == ["demo-namesrv-0.demo-namesrv-headless.prod.svc:9876",
                                      "demo-namesrv-1.demo-namesrv-headless.prod.svc:9876"]


def test_every_object_is_owned_labelled_and_namespaced():
    objs = manifests.all_objects(broker())
    assert [o["kind"] for o in objs] == ["ConfigMap", "Service", "Service", "Service", "Service", "StatefulSet",
                                         "StatefulSet", "PodDisruptionBudget", "PodDisruptionBudget"]
    for o in objs:
        meta = o["metadata"]
        assert meta["namespace"] == "prod"
        assert meta["ownerReferences"] == [{"apiVersion": "ferrymq.io/v1alpha1", "kind": "Broker", "name": "demo",
                                            "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
        assert meta["labels"]["app.kubernetes.io/instance"] == "demo"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "ferrymq-operator"
    assert len({(o["kind"], o["metadata"]["name"]) for o in objs}) == len(objs)


def test_config_map_renders_broker_conf_with_overrides_and_protection():
    cm = manifests.config_map(broker(config={"flushDiskType": "SYNC_FLUSH", "deleteWhen": "04"},
                                     protection={"disableConsumeIfConsumerReadSlowly": True,
                                                 "consumerFallbehindThreshold": "1Gi"}))
    lines = cm["data"]["broker.conf"].splitlines()
    assert lines == sorted(lines)
    conf = dict(line.split("=", 1) for line in lines)
    assert conf["brokerClusterName"] == "demo"
    assert conf["flushDiskType"] == "SYNC_FLUSH" and conf["deleteWhen"] == "04"
    assert conf["disableConsumeIfConsumerReadSlowly"] == "true"
    assert conf["consumerFallbehindThreshold"] == str(2**30)
    assert conf["storePathRootDir"] == "/data/store"


@pytest.mark.parametrize("config, message", [
    ({"flushDiskType": "SYNC"}, "spec.config: flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, got 'SYNC'"),
    ({"fileReservedTme": "48"}, "spec.config: unknown configuration key 'fileReservedTme'"),
    ({"listenPort": "http"}, "spec.config: listenPort: 'http' is not a valid int"),
])
def test_a_broker_conf_that_would_not_start_is_named_before_anything_is_applied(config, message):
    assert manifests.broker_conf_error(broker(config=config)) == message
    assert manifests.broker_conf_error(broker(config={"flushDiskType": "SYNC_FLUSH", "deleteWhen": "01;13"})) is None
    assert manifests.broker_conf_error(broker(protection={"consumerFallbehindThreshold": "1Gi"})) is None
    # a RocketMQ key FerryMQ does not implement is accepted (the broker logs it), unless it would mislead
    assert manifests.broker_conf_error(broker(config={"brokerRole": "ASYNC_MASTER"})) is None
    assert "brokerId of a slave" in manifests.broker_conf_error(broker(config={"brokerRole": "SLAVE"}))


def test_broker_statefulset_storage_update_strategy_and_identity():
    sts = manifests.broker_statefulset(broker(storage={"size": "50Gi", "storageClassName": "fast"}))
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "demo-broker-headless"
    assert spec["updateStrategy"] == {"type": "OnDelete"}
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    (c,) = spec["template"]["spec"]["containers"]
    args = c["args"]
    assert args[0] == "broker"
    assert "--namesrv" not in args  # name servers come from the address service, so scaling them restarts nothing
    assert "fetchNamesrvAddrByAddressServer=true" in args
    assert "rmqAddressServerDomain=demo-nsaddr.prod.svc:8080" in args
    assert "brokerName=$(POD_NAME)" in args
    assert "brokerIP1=$(POD_NAME).demo-broker-headless.$(POD_NAMESPACE).svc" in args
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["template"]["metadata"]["annotations"][ANN_CONFIG_HASH] == manifests.config_hash(broker(
        storage={"size": "50Gi", "storageClassName": "fast"}))


def test_delete_claim_and_replica_override():
    sts = manifests.broker_statefulset(broker(storage={"deleteClaim": True}), replicas=5)
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    assert sts["spec"]["replicas"] == 5
    assert "storageClassName" not in sts["spec"]["volumeClaimTemplates"][0]["spec"]


@pytest.mark.parametrize("builder", [manifests.broker_statefulset, manifests.namesrv_statefulset])
def test_pods_are_non_root_read_only_and_probed(builder):
    pod = builder(broker(httpPort=9090))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert {"name": "http", "containerPort": 9090} in c["ports"]
    assert c["args"][c["args"].index("--http-port") + 1] == "9090"
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_namesrv_statefulset_and_services():
    sts = manifests.namesrv_statefulset(broker(nameServer={"replicas": 3}))
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "demo-namesrv-headless"
    assert sts["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["namesrv", "--host", "0.0.0.0"]
    headless = manifests.namesrv_headless_service(broker())
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    client = manifests.namesrv_service(broker())
    assert "clusterIP" not in client["spec"]
    assert client["spec"]["ports"] == [{"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv"}]
    assert client["spec"]["selector"]["app.kubernetes.io/component"] == "namesrv"
    bh = manifests.broker_headless_service(broker())
    assert bh["spec"]["ports"][0]["port"] == BROKER_PORT and bh["spec"]["clusterIP"] == "None"
    # rocketmq.namesrv.domain=demo-nsaddr.prod.svc: every ready name server answers on its HTTP port
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--address-service-dns") + 1] == "demo-namesrv-headless.prod.svc:9876"
    nsaddr = manifests.address_service(broker())
    assert nsaddr["metadata"]["name"] == "demo-nsaddr" and "clusterIP" not in nsaddr["spec"]
    assert nsaddr["spec"]["ports"] == [{"name": "nsaddr", "port": 8080, "targetPort": "http"}]
    assert nsaddr["spec"]["selector"]["app.kubernetes.io/component"] == "namesrv"


def test_pdbs_allow_one_disruption():
    for component in ("broker", "namesrv"):
        pdb = manifests.pod_disruption_budget(broker(), component)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == component


def test_config_hash_tracks_what_needs_a_restart():
    base = broker()
    h = manifests.config_hash(base)
    assert h == manifests.config_hash(BrokerCluster.from_resource(copy.deepcopy(resource())))
    assert manifests.config_hash(broker(replicas=7)) == h, "scaling must not restart pods"
    assert manifests.config_hash(broker(config={"flushDiskType": "SYNC_FLUSH"})) != h
    assert manifests.config_hash(broker(image="ferrymq/broker:2")) != h
    restarted = BrokerCluster.from_resource(resource(annotations={ANN_RESTART: "2026-11-21"}))
    assert manifests.config_hash(restarted) != h


def test_defaults_fill_a_bare_spec():
    bare = BrokerCluster.from_resource({"metadata": {"name": "b", "namespace": "n"}, "spec": {}})
    objs = manifests.all_objects(bare)
    sts = next(o for o in objs if o["metadata"]["name"] == "b-broker" and o["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "ownerReferences" not in sts["metadata"]


@pytest.mark.parametrize("q,expected", [("1024", 1024), ("1Ki", 1024), ("1.5Gi", 3 * 2**29), ("2M", 2_000_000),
                                        ("16Gi", 16 * 2**30), (7, 7)])
def test_quantities(q, expected):
    assert to_bytes(q) == expected


@pytest.mark.parametrize("bad", ["", "1.Gi", "-1Gi", "10GB", "ten"])
def test_bad_quantities_are_rejected(bad):
    with pytest.raises(ValueError, match="not a quantity"):
        to_bytes(bad)
