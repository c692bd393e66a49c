"""Pure functions from a Broker (its typed model, model.BrokerCluster) to the Kubernetes
objects that run it.

Every builder takes the model and returns plain dicts, so they are unit-tested without a
cluster. Labels, broker.conf and the config hash are derived here and nowhere else.
"""

from __future__ import annotations

import hashlib
import json

from ferrymq.broker.config import build_broker_settings
from ferrymq.common.config_loader import ConfigError
from ferrymq_operator.constants import (
    ADDRESS_SERVICE_PORT,
    ANN_CONFIG_HASH,
    BROKER_NAMESRV_FETCH_MS,
    BROKER_PORT,
    CONTROLLER_PORT,
    HA_PORT,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    NAMESRV_PORT,
    RUN_AS_USER,
)
from ferrymq_operator.model import MAX_SLAVES_PER_GROUP, BrokerCluster

STORE_MOUNT = "/data"
CONF_MOUNT = "/etc/ferrymq"
CONF_FILE = "broker.conf"
ACL_MOUNT = "/etc/ferrymq-acl"  # the <broker>-acl Secret: plain_acl.yml, re-read on change
TLS_MOUNT = "/etc/ferrymq-tls"  # spec.tls.secretName: tls.crt, tls.key
CONTROLLER_REPLICAS = 2  # one leads (Lease), the other stands by
# What the failover controllers' Role grants (their Lease and their state ConfigMap, by
# compare-and-swap). The operator's own Role in the chart holds every one of these: Kubernetes
# lets it grant only what it holds itself.
CONTROLLER_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch", "create", "update"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
]
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def labels(cluster: BrokerCluster, component: str) -> dict[str, str]:
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: cluster.name, LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: "ferrymq-operator", LABEL_PART_OF: "ferrymq"}


def selector_labels(cluster: BrokerCluster, component: str) -> dict[str, str]:
    """The immutable subset used in selectors (never add to it: StatefulSet selectors can't change)."""
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: cluster.name, LABEL_COMPONENT: component}


def instance_selector(cluster: BrokerCluster) -> str:
    """Every object (and claim) the operator made for this Broker, as a label selector."""
    return f"{LABEL_NAME}=ferrymq,{LABEL_INSTANCE}={cluster.name}"


def selector_string(cluster: BrokerCluster, component: str = "broker") -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(cluster, component).items())


def _meta(cluster: BrokerCluster, name: str, component: str, **extra) -> dict:
    meta = {"name": name, "namespace": cluster.namespace, "labels": labels(cluster, component)}
    if cluster.uid:
        meta["ownerReferences"] = [cluster.owner_reference()]
    meta.update(extra)
    return meta


# ---------------------------------------------------------------------------- broker.conf

def broker_conf(cluster: BrokerCluster) -> dict[str, str]:
    """broker.conf as key -> value. Per-pod keys (brokerName, brokerIP1) are set on the
    command line from the pod's name; a person's ``spec.config`` overrides the rest."""
    return {
        "brokerClusterName": cluster.name,
        "brokerId": "0",
        "storePathRootDir": f"{STORE_MOUNT}/store",
        "disableConsumeIfConsumerReadSlowly": str(cluster.disable_consume_if_slow).lower(),
        "consumerFallbehindThreshold": str(cluster.consumer_fallbehind_threshold),
        **({"brokerRole": cluster.replication.broker_role, "haListenPort": str(HA_PORT)}
           if cluster.replication.slaves_per_group else {}),
        **({"enableControllerMode": "true", "controllerAddr": controller_address(cluster)}
           if failover_on(cluster) else {}),
        **_security_conf(cluster),
        # RocketMQ 5 clients (spec.grpc); absent when off, so Brokers without it keep their pods
        **({"grpcListenPort": str(cluster.grpc_port)} if cluster.grpc_port is not None else {}),
        **cluster.config,
    }


def failover_on(cluster: BrokerCluster) -> bool:
    """spec.replication.failover with slaves to fail over to."""
    return cluster.replication.failover and cluster.replication.slaves_per_group > 0


def controller_address(cluster: BrokerCluster) -> str:
    """The failover controllers' stable addresses (each pod behind the headless Service), ``;``
    between them: a broker asks the next when one does not answer or does not lead."""
    n = cluster.names
    return ";".join(f"{n.controller_pod(i)}.{n.controller}.{cluster.namespace}.svc:{CONTROLLER_PORT}"
                    for i in range(CONTROLLER_REPLICAS))


def _security_conf(cluster: BrokerCluster) -> dict[str, str]:
    conf: dict[str, str] = {}
    if cluster.acl_enabled:
        conf.update({"aclEnable": "true", "aclFile": f"{ACL_MOUNT}/plain_acl.yml"})
    if cluster.tls_secret:
        # The name servers speak TLS as the brokers do; in-cluster registration accepts
        # their certificate as is (the Secret need not carry a CA).
        conf.update({"tlsMode": cluster.tls_mode, "tlsServerCertPath": f"{TLS_MOUNT}/tls.crt",
                     "tlsServerKeyPath": f"{TLS_MOUNT}/tls.key", "useTLS": "true"})
    return conf


def _security_volumes(cluster: BrokerCluster) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) for the ACL and TLS Secrets a Broker asks for."""
    volumes, mounts = [], []
    if cluster.acl_enabled:
        volumes.append({"name": "acl", "secret": {"secretName": cluster.names.acl_secret}})
        mounts.append({"name": "acl", "mountPath": ACL_MOUNT, "readOnly": True})
    if cluster.tls_secret:
        volumes.append({"name": "tls", "secret": {"secretName": cluster.tls_secret}})
        mounts.append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
    return volumes, mounts


def broker_conf_error(cluster: BrokerCluster) -> str | None:
    """Why the broker.conf this Broker asks for would not start a broker (an unknown key, a
    bad value), in the broker's own words; None when it is valid. Checked before anything is
    applied, so a typo in ``spec.config`` never rolls the running brokers into a crash loop."""
    if cluster.grpc_port is not None:
        if "grpcListenPort" in cluster.config:
            return "spec.config.grpcListenPort and spec.grpc both set the gRPC port: set spec.grpc.port only"
        taken = {BROKER_PORT: "the broker port", BROKER_PORT - 2: "the broker's VIP port",
                 cluster.http_port: "spec.httpPort", **({HA_PORT: "the replication port"}
                                                        if cluster.replication.slaves_per_group else {})}
        if cluster.grpc_port in taken:
            return f"spec.grpc.port {cluster.grpc_port} is {taken[cluster.grpc_port]}: choose another port"
    try:
        build_broker_settings(broker_conf(cluster))
    except ConfigError as e:
        return f"spec.config: {e}"
    return None


def render_properties(conf: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(conf.items()))


def config_hash(cluster: BrokerCluster) -> str:
    """What a broker pod must be restarted for: its config file, its image and command, and
    the restart annotation. Pods whose template carried another hash are stale."""
    material = {"conf": broker_conf(cluster), "image": cluster.image, "httpPort": cluster.http_port,
                "resources": cluster.resources, "nameServers": cluster.namesrv_replicas,
                "restart": cluster.restart_token}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def config_map(cluster: BrokerCluster) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cluster, cluster.names.config_map, "broker"),
            "data": {CONF_FILE: render_properties(broker_conf(cluster))}}


# ---------------------------------------------------------------------------- pods

def _security_context() -> dict:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod_security_context() -> dict:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _probes(http_port: int) -> dict:
    def get(path: str, **kw) -> dict:
        return {"httpGet": {"path": path, "port": "http"}, **kw}
    return {
        # Store recovery after a crash can take a while: the startup probe covers it so the
        # liveness probe does not kill a broker that is still replaying its commit log.
        "startupProbe": get("/healthz", periodSeconds=5, failureThreshold=120),
        "livenessProbe": get("/healthz", periodSeconds=10, timeoutSeconds=3, failureThreshold=3),
        "readinessProbe": get("/readyz", periodSeconds=5, timeoutSeconds=3, failureThreshold=2),
    }


_POD_ENV = [
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
]
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"  # set on StatefulSet pods by Kubernetes >= 1.28
# A slave pod's ordinal names its group: slave i of set k follows the master <broker>-broker-i.
_POD_INDEX_ENV = {"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{POD_INDEX_LABEL}']"}}}


def broker_components(cluster: BrokerCluster) -> list[str]:
    """The component label of every broker StatefulSet: masters, then each slave set."""
    return ["broker", *(slave_component(k) for k in cluster.replication.slave_sets)]


def slave_component(k: int) -> str:
    return f"broker-s{k}"


def namesrv_statefulset(cluster: BrokerCluster) -> dict:
    n, http_port = cluster.names, cluster.http_port
    security_volumes, security_mounts = _security_volumes(cluster)
    # Every name server also answers /rocketmq/nsaddr on its HTTP port with the live name
    # servers behind the headless Service (the <broker>-nsaddr Service routes there).
    args = ["namesrv", "--host", "0.0.0.0", "--namesrv-port", str(NAMESRV_PORT), "--http-port", str(http_port),
            "--address-service-dns", f"{n.namesrv_headless}.{cluster.namespace}.svc:{NAMESRV_PORT}"]
    if cluster.tls_secret:
        args += ["--tls-mode", cluster.tls_mode, "--tls-cert", f"{TLS_MOUNT}/tls.crt", "--tls-key", f"{TLS_MOUNT}/tls.key"]
    if cluster.acl_enabled:
        args += ["--acl-file", f"{ACL_MOUNT}/plain_acl.yml"]
    container = {
        "name": "namesrv", "image": cluster.image, "imagePullPolicy": cluster.image_pull_policy,
        "args": args,
        "ports": [{"name": "namesrv", "containerPort": NAMESRV_PORT}, {"name": "http", "containerPort": http_port}],
        "env": list(_POD_ENV),
        "resources": cluster.namesrv_resources,
        "securityContext": _security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *security_mounts],
        **_probes(http_port),
    }
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(cluster, n.namesrv, "namesrv"),
        "spec": {
            "replicas": cluster.namesrv_replicas, "serviceName": n.namesrv_headless,
            # Name servers hold no data: start them together, replace them one by one.
            "podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector_labels(cluster, "namesrv")},
            "template": {
                "metadata": {"labels": labels(cluster, "namesrv")},
                "spec": {"securityContext": _pod_security_context(), "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "containers": [container],
                         "volumes": [{"name": "tmp", "emptyDir": {}}, *security_volumes]},
            },
        },
    }


def _broker_set(cluster: BrokerCluster, name: str, headless: str, component: str, replicas: int,
                identity: list[str]) -> dict:
    """A StatefulSet of broker pods; ``identity``: the ``--set`` arguments that make each pod
    the broker it is (brokerName, and for a slave brokerId and brokerRole)."""
    n, storage, http_port = cluster.names, cluster.storage, cluster.http_port
    security_volumes, security_mounts = _security_volumes(cluster)
    replicated = cluster.replication.slaves_per_group > 0
    ports = [{"name": "broker", "containerPort": BROKER_PORT}, {"name": "http", "containerPort": http_port}]
    if replicated:
        ports.append({"name": "ha", "containerPort": HA_PORT})
    if cluster.grpc_port is not None:
        ports.append({"name": "grpc", "containerPort": cluster.grpc_port})
    container = {
        "name": "broker", "image": cluster.image, "imagePullPolicy": cluster.image_pull_policy,
        "args": ["broker", "--host", "0.0.0.0", "--broker-port", str(BROKER_PORT), "--http-port", str(http_port),
                 "--data-dir", f"{STORE_MOUNT}/store", "-c", f"{CONF_MOUNT}/{CONF_FILE}",
                 # Name servers from the address service, re-read every 10 s: a scaled name-server
                 # StatefulSet reaches the brokers without restarting them.
                 "--set", "fetchNamesrvAddrByAddressServer=true",
                 "--set", f"rmqAddressServerDomain={n.address_service_domain}:{ADDRESS_SERVICE_PORT}",
                 "--set", f"fetchNameSrvAddrInterval={BROKER_NAMESRV_FETCH_MS}",
                 *identity,
                 # Kubernetes expands $(VAR) from env: each pod advertises its own stable DNS name.
                 "--set", f"brokerIP1=$(POD_NAME).{headless}.$(POD_NAMESPACE).svc"],
        "ports": ports,
        "env": [*_POD_ENV, *([_POD_INDEX_ENV] if component != "broker" else [])],
        "resources": cluster.resources,
        "securityContext": _security_context(),
        "volumeMounts": [{"name": "data", "mountPath": STORE_MOUNT}, {"name": "config", "mountPath": CONF_MOUNT, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}, *security_mounts],
        **_probes(http_port),
    }
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage.size}}}
    if storage.storage_class:
        claim_spec["storageClassName"] = storage.storage_class
    pod_spec = {"securityContext": _pod_security_context(), "automountServiceAccountToken": False,
                "enableServiceLinks": False, "terminationGracePeriodSeconds": 60, "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": n.config_map}},
                            {"name": "tmp", "emptyDir": {}}, *security_volumes]}
    if replicated:
        pod_spec["affinity"] = _group_anti_affinity(cluster)
        pod_spec["topologySpreadConstraints"] = _group_spread(cluster)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(cluster, name, component),
        "spec": {
            "replicas": replicas, "serviceName": headless,
            "podManagementPolicy": "OrderedReady",
            # The operator restarts stale pods itself, one at a time and health-gated.
            "updateStrategy": {"type": "OnDelete"},
            # PVCs outlive the Broker unless the person asked otherwise; never on scale-down.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete" if storage.delete_claim else "Retain",
                                                     "whenScaled": "Retain"},
            "selector": {"matchLabels": selector_labels(cluster, component)},
            "template": {
                "metadata": {"labels": labels(cluster, component), "annotations": {ANN_CONFIG_HASH: config_hash(cluster)}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": selector_labels(cluster, component)},
                                      "spec": claim_spec}],
        },
    }


def _group_selector(cluster: BrokerCluster) -> dict:
    """Every broker pod of the Broker, masters and slaves of any set (a group's pods share the
    pod index: ``matchLabelKeys`` narrows it to one group)."""
    return {"matchLabels": {LABEL_NAME: "ferrymq", LABEL_INSTANCE: cluster.name},
            "matchExpressions": [{"key": LABEL_COMPONENT, "operator": "In",
                                  "values": broker_components_all()}]}


def broker_components_all() -> list[str]:
    """The component label of every broker set a Broker can have (masters, each slave set)."""
    return ["broker", *(slave_component(k) for k in range(1, MAX_SLAVES_PER_GROUP + 1))]


def _group_anti_affinity(cluster: BrokerCluster) -> dict:
    """Keep a group's master and slaves (same pod index, any broker set) on different nodes,
    and zones when nodes are labelled with one. Preferred by default (a one-node cluster still
    runs every pod, only without the protection); ``spreadAcrossNodes: Required`` makes the
    node rule a scheduling requirement."""
    def term(topology_key: str) -> dict:
        return {"labelSelector": _group_selector(cluster), "matchLabelKeys": [POD_INDEX_LABEL],
                "topologyKey": topology_key}
    return _anti_affinity(term(HOSTNAME), term(ZONE), cluster.replication.spread_required)


def _anti_affinity(node_term: dict, zone_term: dict, required: bool) -> dict:
    zone = {"weight": 50, "podAffinityTerm": zone_term}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [node_term],
                                    "preferredDuringSchedulingIgnoredDuringExecution": [zone]}}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": node_term}, zone]}}


def _group_spread(cluster: BrokerCluster) -> list[dict]:
    """A topology spread by node: each group's pods (same pod index in every broker set) at most
    one apart per node. (One constraint only: the API keys them by topologyKey and
    whenUnsatisfiable, so a second by hostname, e.g. to balance all broker pods, cannot be added.)"""
    when = "DoNotSchedule" if cluster.replication.spread_required else "ScheduleAnyway"
    return [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": when,
             "labelSelector": _group_selector(cluster), "matchLabelKeys": [POD_INDEX_LABEL]}]


def broker_statefulset(cluster: BrokerCluster, replicas: int | None = None) -> dict:
    """The masters (brokerId 0): pod i is broker group ``<broker>-broker-i``. ``replicas``
    overrides spec.replicas while a scale-down waits for brokers to drain."""
    n = cluster.names
    return _broker_set(cluster, n.broker_sts, n.broker_headless, "broker",
                       cluster.replicas if replicas is None else replicas, ["--set", "brokerName=$(POD_NAME)"])


def slave_statefulset(cluster: BrokerCluster, k: int, replicas: int | None = None) -> dict:
    """Slave set ``k``: its pod i is brokerId ``k`` of group ``<broker>-broker-i``. Its master's HA
    address is the master pod's stable DNS name, given outright: learning it from a name server's
    registration answer (as a RocketMQ slave may) waits up to a registration period when the
    slave registered before its master, and a SYNC_MASTER answers SLAVE_NOT_AVAILABLE meanwhile."""
    n = cluster.names
    identity = ["--set", f"brokerName={n.broker_sts}-$(POD_INDEX)", "--set", f"brokerId={k}"]
    if not failover_on(cluster):  # with failover the controller says who is master and whom to follow
        master = f"{n.broker_sts}-$(POD_INDEX).{n.broker_headless}.$(POD_NAMESPACE).svc:{HA_PORT}"
        identity += ["--set", "brokerRole=SLAVE", "--set", f"haMasterAddress={master}"]
    return _broker_set(cluster, n.slave_sts(k), n.slave_headless(k), slave_component(k),
                       cluster.replicas if replicas is None else replicas, identity)


def controller_statefulset(cluster: BrokerCluster) -> dict:
    """spec.replication.failover: the failover controllers of the Broker's groups (``ferrymq
    controller``), two replicas on different nodes when the scheduler can. Their state (each
    group's epoch, master and in-sync set) lives in the ConfigMap ``<broker>-controller-state``
    and changes only by compare-and-swap on its resourceVersion; the one holding the Lease
    ``<broker>-controller`` decides, the other answers brokers with the leader's address. No
    claim: a rescheduled controller reads the state back from the API server."""
    n, http_port = cluster.names, cluster.http_port
    security_volumes, security_mounts = _security_volumes(cluster)
    args = ["controller", "--host", "0.0.0.0", "--port", str(CONTROLLER_PORT), "--http-port", str(http_port),
            "--failover-timeout", str(cluster.replication.failover_timeout_seconds * 1000),
            "--state", "kubernetes", "--namespace", "$(POD_NAMESPACE)", "--state-name", n.controller_state,
            "--lease-name", n.controller, "--identity", "$(POD_NAME)",
            # what the standby names to brokers when this one leads: the stable name they know
            "--advertise-addr", f"$(POD_NAME).{n.controller}.$(POD_NAMESPACE).svc:{CONTROLLER_PORT}"]
    if cluster.tls_secret:
        args += ["--tls-mode", cluster.tls_mode, "--tls-cert", f"{TLS_MOUNT}/tls.crt", "--tls-key", f"{TLS_MOUNT}/tls.key"]
    container = {
        "name": "controller", "image": cluster.image, "imagePullPolicy": cluster.image_pull_policy, "args": args,
        "ports": [{"name": "controller", "containerPort": CONTROLLER_PORT}, {"name": "http", "containerPort": http_port}],
        "env": list(_POD_ENV), "resources": cluster.namesrv_resources, "securityContext": _security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *security_mounts],
        **_probes(http_port),
    }

    def term(topology_key: str) -> dict:
        return {"labelSelector": {"matchLabels": selector_labels(cluster, "controller")}, "topologyKey": topology_key}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(cluster, n.controller, "controller"),
        "spec": {
            "replicas": CONTROLLER_REPLICAS, "serviceName": n.controller,
            # Both start at once: the Lease, not the start order, says which one decides.
            "podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector_labels(cluster, "controller")},
            "template": {
                "metadata": {"labels": labels(cluster, "controller")},
                "spec": {"securityContext": _pod_security_context(), "serviceAccountName": n.controller,
                         "automountServiceAccountToken": True, "enableServiceLinks": False,
                         "affinity": _anti_affinity(term(HOSTNAME), term(ZONE), cluster.replication.spread_required),
                         "containers": [container],
                         "volumes": [{"name": "tmp", "emptyDir": {}}, *security_volumes]},
            },
        },
    }


def controller_service_account(cluster: BrokerCluster) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(cluster, cluster.names.controller, "controller")}


def controller_role(cluster: BrokerCluster) -> dict:
    """The controllers' rights in the Broker's namespace: their Lease and state ConfigMap."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _meta(cluster, cluster.names.controller, "controller"),
            "rules": [dict(rule) for rule in CONTROLLER_RULES]}


def controller_role_binding(cluster: BrokerCluster) -> dict:
    n = cluster.names
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(cluster, n.controller, "controller"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n.controller},
            "subjects": [{"kind": "ServiceAccount", "name": n.controller, "namespace": cluster.namespace}]}


def controller_state_config_map(cluster: BrokerCluster) -> dict:
    """The controllers' state ConfigMap as the operator creates it, once, empty: owned by the
    Broker so it goes with it (a new Broker of the same name must not inherit old epochs). Never
    applied over: the controllers change it by compare-and-swap, and any other write would make
    the leader's next one conflict."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(cluster, cluster.names.controller_state, "controller")}


def controller_objects(cluster: BrokerCluster) -> list[dict]:
    """The controllers' RBAC before their pods, their Service and PDB."""
    return [controller_service_account(cluster), controller_role(cluster), controller_role_binding(cluster),
            controller_service(cluster), controller_statefulset(cluster), pod_disruption_budget(cluster, "controller")]


# ---------------------------------------------------------------------------- services, PDBs

def _service(cluster: BrokerCluster, name: str, component: str, ports: list[dict], headless: bool) -> dict:
    spec = {"selector": selector_labels(cluster, component), "ports": ports}
    if headless:
        # Publish not-ready addresses: brokers must resolve name servers (and each other)
        # before they are ready, or start-up would deadlock on DNS.
        spec.update({"clusterIP": "None", "publishNotReadyAddresses": True})
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(cluster, name, component), "spec": spec}


def namesrv_headless_service(cluster: BrokerCluster) -> dict:
    return _service(cluster, cluster.names.namesrv_headless, "namesrv",
                    [{"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv"}], headless=True)


def namesrv_service(cluster: BrokerCluster) -> dict:
    """The client entry point: ``<broker>-namesrv.<ns>.svc:9876``."""
    return _service(cluster, cluster.names.namesrv, "namesrv",
                    [{"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv"}], headless=False)


def address_service(cluster: BrokerCluster) -> dict:
    """``<broker>-nsaddr``: RocketMQ's name-server address service (``rocketmq.namesrv.domain``),
    answered by every ready name server on its HTTP port."""
    return _service(cluster, cluster.names.nsaddr, "namesrv",
                    [{"name": "nsaddr", "port": ADDRESS_SERVICE_PORT, "targetPort": "http"}], headless=False)


def _broker_ports(cluster: BrokerCluster) -> list[dict]:
    """The broker port, and with spec.grpc the gRPC port: a 5.x client's endpoints can name
    the headless Service (any broker answers QueryRoute with every broker's gRPC address)."""
    ports = [{"name": "broker", "port": BROKER_PORT, "targetPort": "broker"}]
    if cluster.grpc_port is not None:
        ports.append({"name": "grpc", "port": cluster.grpc_port, "targetPort": "grpc"})
    return ports


def broker_headless_service(cluster: BrokerCluster) -> dict:
    return _service(cluster, cluster.names.broker_headless, "broker", _broker_ports(cluster), headless=True)


def slave_headless_service(cluster: BrokerCluster, k: int) -> dict:
    return _service(cluster, cluster.names.slave_headless(k), slave_component(k), _broker_ports(cluster),
                    headless=True)


def controller_service(cluster: BrokerCluster) -> dict:
    """Headless: brokers reach the controller pod by its stable name (controller_address)."""
    return _service(cluster, cluster.names.controller, "controller",
                    [{"name": "controller", "port": CONTROLLER_PORT, "targetPort": "controller"}], headless=True)


def pod_disruption_budget(cluster: BrokerCluster, component: str) -> dict:
    """One voluntary disruption (a drain's eviction) at a time among a set's pods."""
    n = cluster.names
    name = {"broker": n.broker_sts, "namesrv": n.namesrv}.get(component) or f"{n.broker}-{component}"
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(cluster, name, component),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(cluster, component)}}}


GROUP_PDB_COMPONENT = "broker-group"  # the component label of the per-group PDBs (not of any pod)


def group_disruption_budget(cluster: BrokerCluster, ordinal: int) -> dict:
    """With replication, one PDB per broker group (its master and slaves: the pods of every
    broker set with pod index ``ordinal``): a drain never evicts two copies of a group at once.
    It replaces the per-set PDBs, since the eviction API refuses a pod under two PDBs."""
    selector = _group_selector(cluster)
    selector = {"matchLabels": {**selector["matchLabels"], POD_INDEX_LABEL: str(ordinal)},
                "matchExpressions": selector["matchExpressions"]}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(cluster, cluster.names.group_pdb(ordinal), GROUP_PDB_COMPONENT),
            "spec": {"maxUnavailable": 1, "selector": selector}}


def disruption_budgets(cluster: BrokerCluster, broker_replicas: int | None = None) -> list[dict]:
    """The name servers' PDB, and the brokers': one per group with replication (a group never
    loses two copies to evictions), else one over the masters (one broker at a time)."""
    replicas = cluster.replicas if broker_replicas is None else broker_replicas
    brokers = ([group_disruption_budget(cluster, i) for i in range(replicas)] if cluster.replication.slaves_per_group
               else [pod_disruption_budget(cluster, "broker")])
    return [pod_disruption_budget(cluster, "namesrv"), *brokers]


def stale_disruption_budgets(cluster: BrokerCluster, existing: list[str],
                             broker_replicas: int | None = None) -> list[str]:
    """Which of the Broker's PDBs (``existing``: names of those labelled with its instance) it
    no longer wants: per-set ones once groups have their own, groups gone by a scale-down, the
    controllers' once failover is off."""
    wanted = {p["metadata"]["name"] for p in disruption_budgets(cluster, broker_replicas)}
    if failover_on(cluster):
        wanted.add(pod_disruption_budget(cluster, "controller")["metadata"]["name"])
    return sorted(name for name in existing if name not in wanted)


def certificate(cluster: BrokerCluster) -> dict:
    """The cert-manager Certificate for ``spec.tls.issuerRef``: every name clients and pods
    use for the name servers and brokers, written into the Secret the pods mount."""
    n, ns = cluster.names, cluster.namespace
    issuer_name, issuer_kind = cluster.tls_issuer
    dns = [n.namesrv, f"{n.namesrv}.{ns}", f"{n.namesrv}.{ns}.svc", f"*.{n.namesrv_headless}.{ns}.svc",
           f"*.{n.broker_headless}.{ns}.svc"]
    return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": _meta(cluster, cluster.tls_secret, "broker"),
            "spec": {"secretName": cluster.tls_secret, "dnsNames": dns, "usages": ["server auth", "client auth"],
                     "issuerRef": {"name": issuer_name, "kind": issuer_kind, "group": "cert-manager.io"}}}


def all_objects(cluster: BrokerCluster, broker_replicas: int | None = None) -> list[dict]:
    """Everything a Broker owns, in the order to apply it (config before its readers)."""
    slaves = cluster.replication.slave_sets
    controller = controller_objects(cluster) if failover_on(cluster) else []
    return [config_map(cluster), namesrv_headless_service(cluster), namesrv_service(cluster), address_service(cluster),
            broker_headless_service(cluster), *(slave_headless_service(cluster, k) for k in slaves),
            namesrv_statefulset(cluster), *controller, broker_statefulset(cluster, broker_replicas),
            *(slave_statefulset(cluster, k, broker_replicas) for k in slaves),
            *disruption_budgets(cluster, broker_replicas)]


def retired_slave_objects(cluster: BrokerCluster) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of slave sets a smaller ``slavesPerGroup`` no longer wants
    (their PVCs stay, as on any scale-down)."""
    n = cluster.names
    out = []
    for k in range(cluster.replication.slaves_per_group + 1, MAX_SLAVES_PER_GROUP + 1):
        out += [("apps/v1", "StatefulSet", n.slave_sts(k)), ("v1", "Service", n.slave_headless(k))]
    return out


def retired_controller_objects(cluster: BrokerCluster) -> list[tuple[str, str, str]]:
    """The failover controllers' objects once failover is off (their PDB goes with the other
    stale PDBs; their state ConfigMap and Lease stay, as the claim of a pre-0.2 single
    controller does)."""
    n = cluster.names
    if failover_on(cluster):
        return []
    return [("apps/v1", "StatefulSet", n.controller), ("v1", "Service", n.controller),
            ("rbac.authorization.k8s.io/v1", "RoleBinding", n.controller),
            ("rbac.authorization.k8s.io/v1", "Role", n.controller), ("v1", "ServiceAccount", n.controller)]
