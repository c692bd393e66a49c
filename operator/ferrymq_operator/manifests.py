"""Pure functions from a Broker custom resource to the Kubernetes objects that run it.

Every builder takes the resource as a plain dict (what kopf hands us) and returns plain
dicts, so they are unit-tested without a cluster. Names, labels and the config hash are
derived here and nowhere else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ferrymq.broker.config import BrokerConfig
from ferrymq.common.config_loader import ConfigError, apply_settings
from ferrymq.store.config import StoreConfig
from ferrymq_operator.constants import (
    ANN_CONFIG_HASH,
    ANN_RESTART,
    API_VERSION,
    BROKER_PORT,
    DEFAULT_BROKER_IMAGE,
    DEFAULT_HTTP_PORT,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    NAMESRV_PORT,
    RUN_AS_USER,
)
from ferrymq_operator.quantity import to_bytes

STORE_MOUNT = "/data"
CONF_MOUNT = "/etc/ferrymq"
CONF_FILE = "broker.conf"


@dataclass(frozen=True)
class BrokerNames:
    """Object names for one Broker resource."""

    broker: str  # the custom resource's name; also the RocketMQ cluster name of its brokers
    namespace: str

    @property
    def config_map(self) -> str:
        return f"{self.broker}-config"

    @property
    def namesrv(self) -> str:  # StatefulSet, PDB and the client Service
        return f"{self.broker}-namesrv"

    @property
    def namesrv_headless(self) -> str:
        return f"{self.broker}-namesrv-headless"

    @property
    def broker_sts(self) -> str:  # StatefulSet and PDB
        return f"{self.broker}-broker"

    @property
    def broker_headless(self) -> str:
        return f"{self.broker}-broker-headless"

    def broker_pod(self, ordinal: int) -> str:
        """Pod name; also the RocketMQ brokerName of that pod (stable across restarts)."""
        return f"{self.broker_sts}-{ordinal}"

    def namesrv_pod_host(self, ordinal: int) -> str:
        return f"{self.namesrv}-{ordinal}.{self.namesrv_headless}.{self.namespace}.svc"

    def namesrv_addresses(self, replicas: int) -> list[str]:
        """Each name server's stable DNS address (clients want the whole list)."""
        return [f"{self.namesrv_pod_host(i)}:{NAMESRV_PORT}" for i in range(replicas)]


def names_of(broker: dict) -> BrokerNames:
    return BrokerNames(broker["metadata"]["name"], broker["metadata"].get("namespace", "default"))


# ---------------------------------------------------------------------------- spec defaults
# The CRD's OpenAPI defaults fill these in on the server; repeating them here keeps the
# builders total when fed a hand-written dict (tests, older objects).

def spec_of(broker: dict) -> dict:
    spec = dict(broker.get("spec") or {})
    spec.setdefault("replicas", 1)
    spec.setdefault("image", DEFAULT_BROKER_IMAGE)
    spec.setdefault("imagePullPolicy", "IfNotPresent")
    spec.setdefault("httpPort", DEFAULT_HTTP_PORT)
    spec["storage"] = {"size": "10Gi", "deleteClaim": False, **(spec.get("storage") or {})}
    spec["nameServer"] = {"replicas": 1, **(spec.get("nameServer") or {})}
    spec["protection"] = {"disableConsumeIfConsumerReadSlowly": False, "consumerFallbehindThreshold": "16Gi",
                          **(spec.get("protection") or {})}
    spec.setdefault("config", {})
    spec.setdefault("resources", {})
    return spec


def labels(broker: dict, component: str) -> dict[str, str]:
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: broker["metadata"]["name"], LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: "ferrymq-operator", LABEL_PART_OF: "ferrymq"}


def selector_labels(broker: dict, component: str) -> dict[str, str]:
    """The immutable subset used in selectors (never add to it: StatefulSet selectors can't change)."""
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: broker["metadata"]["name"], LABEL_COMPONENT: component}


def selector_string(broker: dict, component: str = "broker") -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(broker, component).items())


def owner_reference(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj.get("kind", "Broker"), "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _meta(broker: dict, name: str, component: str, **extra) -> dict:
    meta = {"name": name, "namespace": names_of(broker).namespace, "labels": labels(broker, component)}
    if broker["metadata"].get("uid"):
        meta["ownerReferences"] = [owner_reference(broker)]
    meta.update(extra)
    return meta


# ---------------------------------------------------------------------------- broker.conf

def broker_conf(broker: dict) -> dict[str, str]:
    """broker.conf as key -> value. Per-pod keys (brokerName, brokerIP1) are set on the
    command line from the pod's name; a person's ``spec.config`` overrides the rest."""
    spec = spec_of(broker)
    protection = spec["protection"]
    conf = {
        "brokerClusterName": broker["metadata"]["name"],
        "brokerId": "0",
        "storePathRootDir": f"{STORE_MOUNT}/store",
        "disableConsumeIfConsumerReadSlowly": str(bool(protection["disableConsumeIfConsumerReadSlowly"])).lower(),
        "consumerFallbehindThreshold": str(to_bytes(protection["consumerFallbehindThreshold"])),
    }
    conf.update({k: str(v) for k, v in (spec["config"] or {}).items()})
    return conf


def broker_conf_error(broker: dict) -> str | None:
    """Why the broker.conf this Broker asks for would not start a broker (an unknown key, a
    bad value), in the broker's own words; None when it is valid. Checked before anything is
    applied, so a typo in ``spec.config`` never rolls the running brokers into a crash loop."""
    try:
        apply_settings(broker_conf(broker), BrokerConfig(), StoreConfig(store_path_root_dir=""))
    except ConfigError as e:
        return f"spec.config: {e}"
    return None


def render_properties(conf: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(conf.items()))


def config_hash(broker: dict) -> str:
    """What a broker pod must be restarted for: its config file, its image and command, and
    the restart annotation. Pods whose template carried another hash are stale."""
    spec = spec_of(broker)
    material = {"conf": broker_conf(broker), "image": spec["image"], "httpPort": spec["httpPort"],
                "resources": spec["resources"], "nameServers": spec["nameServer"]["replicas"],
                "restart": (broker["metadata"].get("annotations") or {}).get(ANN_RESTART, "")}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def config_map(broker: dict) -> dict:
    n = names_of(broker)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(broker, n.config_map, "broker"),
            "data": {CONF_FILE: render_properties(broker_conf(broker))}}


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


def namesrv_statefulset(broker: dict) -> dict:
    n, spec = names_of(broker), spec_of(broker)
    ns_spec = spec["nameServer"]
    container = {
        "name": "namesrv", "image": spec["image"], "imagePullPolicy": spec["imagePullPolicy"],
        "args": ["namesrv", "--host", "0.0.0.0", "--namesrv-port", str(NAMESRV_PORT),
                 "--http-port", str(spec["httpPort"])],
        "ports": [{"name": "namesrv", "containerPort": NAMESRV_PORT}, {"name": "http", "containerPort": spec["httpPort"]}],
        "env": list(_POD_ENV),
        "resources": ns_spec.get("resources") or {},
        "securityContext": _security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        **_probes(spec["httpPort"]),
    }
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(broker, n.namesrv, "namesrv"),
        "spec": {
            "replicas": ns_spec["replicas"], "serviceName": n.namesrv_headless,
            # Name servers hold no data: start them together, replace them one by one.
            "podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector_labels(broker, "namesrv")},
            "template": {
                "metadata": {"labels": labels(broker, "namesrv")},
                "spec": {"securityContext": _pod_security_context(), "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "containers": [container],
                         "volumes": [{"name": "tmp", "emptyDir": {}}]},
            },
        },
    }


def broker_statefulset(broker: dict, replicas: int | None = None) -> dict:
    """``replicas`` overrides spec.replicas while a scale-down waits for brokers to drain."""
    n, spec = names_of(broker), spec_of(broker)
    storage = spec["storage"]
    ns_list = ";".join(n.namesrv_addresses(spec["nameServer"]["replicas"]))
    container = {
        "name": "broker", "image": spec["image"], "imagePullPolicy": spec["imagePullPolicy"],
        "args": ["broker", "--host", "0.0.0.0", "--broker-port", str(BROKER_PORT), "--http-port", str(spec["httpPort"]),
                 "--namesrv", ns_list, "--data-dir", f"{STORE_MOUNT}/store", "-c", f"{CONF_MOUNT}/{CONF_FILE}",
                 # Kubernetes expands $(VAR) from env: each pod advertises its own stable DNS name.
                 "--set", "brokerName=$(POD_NAME)",
                 "--set", f"brokerIP1=$(POD_NAME).{n.broker_headless}.$(POD_NAMESPACE).svc"],
        "ports": [{"name": "broker", "containerPort": BROKER_PORT}, {"name": "http", "containerPort": spec["httpPort"]}],
        "env": list(_POD_ENV),
        "resources": spec["resources"] or {},
        "securityContext": _security_context(),
        "volumeMounts": [{"name": "data", "mountPath": STORE_MOUNT}, {"name": "config", "mountPath": CONF_MOUNT, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        **_probes(spec["httpPort"]),
    }
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage["size"]}}}
    if storage.get("storageClassName"):
        claim_spec["storageClassName"] = storage["storageClassName"]
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(broker, n.broker_sts, "broker"),
        "spec": {
            "replicas": spec["replicas"] if replicas is None else replicas, "serviceName": n.broker_headless,
            "podManagementPolicy": "OrderedReady",
            # The operator restarts stale pods itself, one at a time and health-gated.
            "updateStrategy": {"type": "OnDelete"},
            # PVCs outlive the Broker unless the person asked otherwise; never on scale-down.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete" if storage.get("deleteClaim") else "Retain",
                                                     "whenScaled": "Retain"},
            "selector": {"matchLabels": selector_labels(broker, "broker")},
            "template": {
                "metadata": {"labels": labels(broker, "broker"), "annotations": {ANN_CONFIG_HASH: config_hash(broker)}},
                "spec": {"securityContext": _pod_security_context(), "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "terminationGracePeriodSeconds": 60, "containers": [container],
                         "volumes": [{"name": "config", "configMap": {"name": n.config_map}},
                                     {"name": "tmp", "emptyDir": {}}]},
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": selector_labels(broker, "broker")},
                                      "spec": claim_spec}],
        },
    }


# ---------------------------------------------------------------------------- services, PDBs

def _service(broker: dict, name: str, component: str, ports: list[dict], headless: bool) -> dict:
    spec = {"selector": selector_labels(broker, component), "ports": ports}
    if headless:
        # Publish not-ready addresses: brokers must resolve name servers (and each other)
        # before they are ready, or start-up would deadlock on DNS.
        spec.update({"clusterIP": "None", "publishNotReadyAddresses": True})
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(broker, name, component), "spec": spec}


def namesrv_headless_service(broker: dict) -> dict:
    return _service(broker, names_of(broker).namesrv_headless, "namesrv",
                    [{"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv"}], headless=True)


def namesrv_service(broker: dict) -> dict:
    """The client entry point: ``<broker>-namesrv.<ns>.svc:9876``."""
    return _service(broker, names_of(broker).namesrv, "namesrv",
                    [{"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv"}], headless=False)


def broker_headless_service(broker: dict) -> dict:
    return _service(broker, names_of(broker).broker_headless, "broker",
                    [{"name": "broker", "port": BROKER_PORT, "targetPort": "broker"}], headless=True)


def pod_disruption_budget(broker: dict, component: str) -> dict:
    n = names_of(broker)
    name = n.broker_sts if component == "broker" else n.namesrv
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(broker, name, component),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(broker, component)}}}


def all_objects(broker: dict, broker_replicas: int | None = None) -> list[dict]:
    """Everything a Broker owns, in the order to apply it (config before its readers)."""
    return [config_map(broker), namesrv_headless_service(broker), namesrv_service(broker),
            broker_headless_service(broker), namesrv_statefulset(broker), broker_statefulset(broker, broker_replicas),
            pod_disruption_budget(broker, "namesrv"), pod_disruption_budget(broker, "broker")]
