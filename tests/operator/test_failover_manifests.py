"""spec.replication.failover as the operator builds it: one controller pod with its own claim
and a stable address, every broker of a group pointed at it (controller mode, brokerRole the
group's master role, slaves without a fixed master), the controller dropped again when failover
is turned off; the config the brokers get starts a broker."""

from __future__ import annotations

from ferrymq.broker.config import build_broker_settings
from ferrymq.common.config_loader import parse_assignments
from ferrymq_operator import manifests
from ferrymq_operator.model import BrokerCluster


def cluster(**replication) -> BrokerCluster:
    spec = {"replicas": 2, "replication": replication, "storage": {"storageClassName": "fast"}}
    return BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod", "uid": "u1"}, "spec": spec})


def by_kind_name(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def args_of(sts):
    return sts["spec"]["template"]["spec"]["containers"][0]["args"]


def sets(args: list[str]) -> dict[str, str]:
    return parse_assignments([args[i + 1] for i, a in enumerate(args) if a == "--set"])


def test_failover_adds_one_controller_with_a_claim_and_a_stable_address():
    c = cluster(slavesPerGroup=1, mode="Sync", failover=True, failoverTimeoutSeconds=7)
    objs = by_kind_name(manifests.all_objects(c))
    sts, svc = objs[("StatefulSet", "demo-controller")], objs[("Service", "demo-controller")]
    assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == "demo-controller"
    args = args_of(sts)
    assert args[:1] == ["controller"] and "--failover-timeout" in args
    assert args[args.index("--failover-timeout") + 1] == "7000"
    assert args[args.index("--data-dir") + 1].startswith("/data/")
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["storageClassName"] == "fast" and claim["metadata"]["name"] == "data"
    mounts = {m["name"]: m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["data"] == "/data"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9878
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert sts["metadata"]["ownerReferences"][0]["uid"] == "u1"
    # applied before the brokers that need it
    order = [(o["kind"], o["metadata"]["name"]) for o in manifests.all_objects(c)]
    assert order.index(("StatefulSet", "demo-controller")) < order.index(("StatefulSet", "demo-broker"))


def test_every_broker_of_a_group_asks_the_controller_and_its_config_starts_a_broker():
    c = cluster(slavesPerGroup=2, mode="Sync", failover=True)
    conf = manifests.broker_conf(c)
    assert conf["enableControllerMode"] == "true"
    assert conf["controllerAddr"] == "demo-controller-0.demo-controller.prod.svc:9878"
    assert conf["brokerRole"] == "SYNC_MASTER"
    assert manifests.broker_conf_error(c) is None
    for k in (1, 2):
        identity = sets(args_of(manifests.slave_statefulset(c, k)))
        assert identity["brokerId"] == str(k)
        assert "brokerRole" not in identity and "haMasterAddress" not in identity  # the controller says
        # what the pod would start with: broker.conf, then its --set identity
        broker, _, _ = build_broker_settings(conf, {k_: v for k_, v in identity.items()
                                                    if k_ in ("brokerName", "brokerId")})
        assert broker.enable_controller_mode and broker.broker_id == k and broker.broker_role == "SYNC_MASTER"
    # a slave may become master: every set exposes the HA port
    for sts in (manifests.broker_statefulset(c), manifests.slave_statefulset(c, 1)):
        ports = {p["name"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert "ha" in ports


def test_without_failover_nothing_changes_and_the_controller_is_retired():
    c = cluster(slavesPerGroup=1, mode="Sync")
    objs = by_kind_name(manifests.all_objects(c))
    assert ("StatefulSet", "demo-controller") not in objs
    assert "enableControllerMode" not in manifests.broker_conf(c)
    identity = sets(args_of(manifests.slave_statefulset(c, 1)))
    assert identity["brokerRole"] == "SLAVE" and identity["haMasterAddress"].endswith(":10912")
    assert manifests.retired_controller_objects(c) == [("apps/v1", "StatefulSet", "demo-controller"),
                                                       ("v1", "Service", "demo-controller")]
    assert manifests.retired_controller_objects(cluster(slavesPerGroup=1, failover=True)) == []


def test_turning_failover_on_restarts_the_brokers():
    assert manifests.config_hash(cluster(slavesPerGroup=1)) != manifests.config_hash(cluster(slavesPerGroup=1,
                                                                                             failover=True))
