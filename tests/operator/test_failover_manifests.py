"""spec.replication.failover as the operator builds it: two controller pods (state in a
ConfigMap, leader by a Lease, their own ServiceAccount and Role) with stable addresses, every
broker of a group pointed at both (controller mode, brokerRole the group's master role, slaves
without a fixed master), the controllers dropped again when failover is turned off; the config
the brokers get starts a broker."""

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


def test_failover_adds_two_controllers_keeping_state_in_the_api_server():
    c = cluster(slavesPerGroup=1, mode="Sync", failover=True, failoverTimeoutSeconds=7)
    objs = by_kind_name(manifests.all_objects(c))
    sts, svc = objs[("StatefulSet", "demo-controller")], objs[("Service", "demo-controller")]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "demo-controller"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    args = args_of(sts)
    assert args[:1] == ["controller"] and "--failover-timeout" in args
    assert args[args.index("--failover-timeout") + 1] == "7000"
    # the state in a ConfigMap (compare-and-swap), the leader by a Lease, each pod by its name
    flags = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}
    assert flags["--state"] == "kubernetes" and flags["--namespace"] == "$(POD_NAMESPACE)"
    assert flags["--state-name"] == "demo-controller-state" and flags["--lease-name"] == "demo-controller"
    assert flags["--identity"] == "$(POD_NAME)"
    assert flags["--advertise-addr"] == "$(POD_NAME).demo-controller.$(POD_NAMESPACE).svc:9878"
    for addr in manifests.broker_conf(c)["controllerAddr"].split(";"):  # what brokers dial is what is advertised
        assert addr.replace("prod", "$(POD_NAMESPACE)").replace("demo-controller-0.", "$(POD_NAME).").replace(
            "demo-controller-1.", "$(POD_NAME).") == flags["--advertise-addr"]
    state = manifests.controller_state_config_map(c)
    assert state["metadata"]["name"] == "demo-controller-state" and "data" not in state
    assert state["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert "--data-dir" not in args
    env = {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env
    # no claim: nothing on disk
    assert "volumeClaimTemplates" not in sts["spec"] and "persistentVolumeClaimRetentionPolicy" not in sts["spec"]
    mounts = {m["name"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert "data" not in mounts
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "demo-controller" and pod["automountServiceAccountToken"] is True
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9878
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert sts["metadata"]["ownerReferences"][0]["uid"] == "u1"
    # the two on different nodes when the scheduler can
    terms = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["weight"] == 100 and terms[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    pdb = objs[("PodDisruptionBudget", "demo-controller")]
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    # applied before the brokers that need it, RBAC before the pods that use it
    order = [(o["kind"], o["metadata"]["name"]) for o in manifests.all_objects(c)]
    assert order.index(("StatefulSet", "demo-controller")) < order.index(("StatefulSet", "demo-broker"))
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert order.index((kind, "demo-controller")) < order.index(("StatefulSet", "demo-controller"))


def test_the_controllers_role_grants_their_lease_and_state_only_in_the_brokers_namespace():
    c = cluster(slavesPerGroup=1, failover=True)
    objs = by_kind_name(manifests.all_objects(c))
    sa, role, binding = (objs[(k, "demo-controller")] for k in ("ServiceAccount", "Role", "RoleBinding"))
    assert sa["metadata"]["namespace"] == role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "prod"
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {(g, r, v) for g, r in (("coordination.k8s.io", "leases"), ("", "configmaps"))
                       for v in ("get", "list", "watch", "create", "update")}
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "demo-controller"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-controller", "namespace": "prod"}]


def test_required_spread_makes_the_controllers_anti_affinity_a_requirement():
    c = cluster(slavesPerGroup=1, failover=True, spreadAcrossNodes="Required")
    pod = manifests.controller_statefulset(c)["spec"]["template"]["spec"]
    required = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in required] == ["kubernetes.io/hostname"]


def test_every_broker_of_a_group_asks_the_controller_and_its_config_starts_a_broker():
    c = cluster(slavesPerGroup=2, mode="Sync", failover=True)
    conf = manifests.broker_conf(c)
    assert conf["enableControllerMode"] == "true"
    assert conf["controllerAddr"] == ("demo-controller-0.demo-controller.prod.svc:9878;"
                                      "demo-controller-1.demo-controller.prod.svc:9878")
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
    assert manifests.retired_controller_objects(c) == [
        ("apps/v1", "StatefulSet", "demo-controller"), ("v1", "Service", "demo-controller"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "demo-controller"),
        ("rbac.authorization.k8s.io/v1", "Role", "demo-controller"), ("v1", "ServiceAccount", "demo-controller")]
    assert "demo-controller" in manifests.stale_disruption_budgets(c, ["demo-controller", "demo-namesrv"])
    assert manifests.stale_disruption_budgets(cluster(slavesPerGroup=1, failover=True),
                                              ["demo-controller", "demo-namesrv"]) == []
    assert manifests.retired_controller_objects(cluster(slavesPerGroup=1, failover=True)) == []


def test_turning_failover_on_restarts_the_brokers():
    assert manifests.config_hash(cluster(slavesPerGroup=1)) != manifests.config_hash(cluster(slavesPerGroup=1,
                                                                                             failover=True))


def test_the_controller_pod_command_is_one_ferrymq_controller_accepts():
    """The args as the container runs them ($(VAR) expanded from the Downward API) parse and
    validate with ``ferrymq controller``'s own flags: state in the Broker's namespace."""
    from ferrymq.cli import controller_options
    from ferrymq.cli.main import build_parser

    c = cluster(slavesPerGroup=1, failover=True)
    env = {"POD_NAME": "demo-controller-1", "POD_NAMESPACE": "prod"}
    args = [a.replace("$(POD_NAME)", env["POD_NAME"]).replace("$(POD_NAMESPACE)", env["POD_NAMESPACE"])
            for a in args_of(manifests.controller_statefulset(c))]
    parsed = build_parser().parse_args(args)
    controller_options.check_flags(parsed)
    backend = controller_options.kubernetes_backend(parsed, None, env)
    assert (backend.namespace, backend.state_name, backend.lease_name, backend.identity) == (
        "prod", "demo-controller-state", "demo-controller", "demo-controller-1")
    assert controller_options.advertise_addr(parsed, env) == "demo-controller-1.demo-controller.prod.svc:9878"
