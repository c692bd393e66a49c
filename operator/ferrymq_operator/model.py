"""The typed model of a Broker custom resource: defaults applied, quantities parsed and names
derived once, when the resource is read (``BrokerCluster.from_resource``). The builders in
manifests.py and the reconcile code read this model, never the raw dict.

The CRD's OpenAPI defaults fill most of these in on the server; repeating them here keeps the
model whole when fed a hand-written dict (tests, objects stored before a default existed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq_operator.constants import (
    ANN_MANAGED,
    ANN_PAUSE,
    ANN_RESTART,
    API_VERSION,
    DEFAULT_BROKER_IMAGE,
    DEFAULT_HTTP_PORT,
    GRPC_PORT,
    NAMESRV_PORT,
)
from ferrymq_operator.quantity import to_bytes
from ferrymq_operator.views import ResourceView


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
    def nsaddr(self) -> str:  # the Service of the name-server address service (on the name servers' HTTP port)
        return f"{self.broker}-nsaddr"

    @property
    def address_service_domain(self) -> str:
        """What clients set as rocketmq.namesrv.domain (port 8080 implied, as RocketMQ's)."""
        return f"{self.nsaddr}.{self.namespace}.svc"

    @property
    def broker_sts(self) -> str:  # StatefulSet and PDB
        return f"{self.broker}-broker"

    @property
    def broker_headless(self) -> str:
        return f"{self.broker}-broker-headless"

    @property
    def acl_secret(self) -> str:  # plain_acl.yml for the pods
        return f"{self.broker}-acl"

    @property
    def operator_secret(self) -> str:  # the operator's own admin account
        return f"{self.broker}-operator-credentials"

    def broker_pod(self, ordinal: int) -> str:
        """Pod name; also the RocketMQ brokerName of that pod (stable across restarts)."""
        return f"{self.broker_sts}-{ordinal}"

    # Replication: slave set k (1, 2) holds brokerId k of every broker group; its pod with
    # ordinal i is a slave of broker_pod(i) (the group's brokerName).

    @property
    def controller(self) -> str:
        """The failover controllers: StatefulSet, headless Service, PDB, ServiceAccount, Role,
        RoleBinding, and the Lease they elect their leader with."""
        return f"{self.broker}-controller"

    @property
    def controller_state(self) -> str:  # the ConfigMap the controllers keep the groups' state in
        return f"{self.broker}-controller-state"

    def controller_pod(self, ordinal: int) -> str:
        return f"{self.controller}-{ordinal}"

    def group_pdb(self, ordinal: int) -> str:  # with replication: one PDB per broker group
        return f"{self.broker_sts}-group-{ordinal}"

    def slave_sts(self, k: int) -> str:  # StatefulSet and PDB
        return f"{self.broker}-broker-s{k}"

    def slave_headless(self, k: int) -> str:
        return f"{self.broker}-broker-s{k}-headless"

    def slave_pod(self, k: int, ordinal: int) -> str:
        return f"{self.slave_sts(k)}-{ordinal}"

    def namesrv_pod_host(self, ordinal: int) -> str:
        return f"{self.namesrv}-{ordinal}.{self.namesrv_headless}.{self.namespace}.svc"

    def namesrv_addresses(self, replicas: int) -> list[str]:
        """Each name server's stable DNS address (clients want the whole list)."""
        return [f"{self.namesrv_pod_host(i)}:{NAMESRV_PORT}" for i in range(replicas)]


@dataclass(frozen=True)
class Storage:
    size: str = "10Gi"
    delete_claim: bool = False  # delete the PVCs with the Broker
    storage_class: str | None = None


MAX_SLAVES_PER_GROUP = 2


@dataclass(frozen=True)
class Replication:
    """spec.replication: RocketMQ 4.x master-slave groups."""

    slaves_per_group: int = 0  # 0: masters only
    mode: str = "Async"  # Async: ASYNC_MASTER; Sync: SYNC_MASTER (a send waits for a slave)
    # A slave at most this many CommitLog bytes behind its master is in sync: only then may
    # the master be restarted (rollout.plan_replicated_restart).
    max_restart_lag_bytes: int = 1024 * 1024
    # Failover (FerryMQ's controller): a master silent this long is replaced by an in-sync slave.
    failover: bool = False
    failover_timeout_seconds: int = 10
    # spec.replication.spreadAcrossNodes: a group's pods (and the two controllers) on different
    # nodes. Preferred: when the scheduler can (a one-node cluster still runs everything);
    # Required: a pod stays Pending rather than share a node with its group.
    spread: str = "Preferred"

    @property
    def spread_required(self) -> bool:
        return self.spread == "Required"

    @property
    def broker_role(self) -> str:
        return "SYNC_MASTER" if self.mode == "Sync" else "ASYNC_MASTER"

    @property
    def slave_sets(self) -> range:
        return range(1, self.slaves_per_group + 1)


@dataclass(frozen=True)
class BrokerCluster:
    """One Broker resource: its name servers and brokers, as the operator runs them."""

    names: BrokerNames
    uid: str | None = None  # None: not stored yet (no owner references can point at it)
    generation: int | None = None
    replicas: int = 1
    image: str = DEFAULT_BROKER_IMAGE
    image_pull_policy: str = "IfNotPresent"
    http_port: int = DEFAULT_HTTP_PORT
    storage: Storage = field(default_factory=Storage)
    namesrv_replicas: int = 1
    namesrv_resources: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    disable_consume_if_slow: bool = False
    consumer_fallbehind_threshold: int = 16 * 2**30  # bytes
    config: dict[str, str] = field(default_factory=dict)  # spec.config: broker.conf keys
    acl_enabled: bool = False  # spec.acl.enabled: every request signed by a User's account
    tls_secret: str | None = None  # spec.tls.secretName: tls.crt/tls.key for both ports
    tls_issuer: tuple[str, str] | None = None  # spec.tls.issuerRef (name, kind): cert-manager writes tls_secret
    tls_mode: str = "enforcing"
    replication: Replication = field(default_factory=Replication)
    grpc_port: int | None = None  # spec.grpc: the port RocketMQ 5 (gRPC) clients use; None = off
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False  # metadata.deletionTimestamp is set
    api_version: str = API_VERSION
    kind: str = "Broker"

    @classmethod
    def from_resource(cls, obj: dict, default_image: str = DEFAULT_BROKER_IMAGE) -> "BrokerCluster":
        """The model of a Broker resource (a dict as kopf or the API server hands it over).
        ``default_image``: the operator's broker image, for a Broker that names none."""
        res = ResourceView(obj)
        spec = res.spec
        storage = spec.get("storage") or {}
        ns = spec.get("nameServer") or {}
        protection = spec.get("protection") or {}
        tls = spec.get("tls") or {}
        replication = spec.get("replication") or {}
        return cls(
            names=BrokerNames(res.name, res.namespace or "default"),
            uid=res.uid, generation=res.generation,
            replicas=int(spec.get("replicas", 1)), image=spec.get("image") or default_image,
            image_pull_policy=spec.get("imagePullPolicy") or "IfNotPresent",
            http_port=int(spec.get("httpPort", DEFAULT_HTTP_PORT)),
            storage=Storage(size=str(storage.get("size", "10Gi")), delete_claim=bool(storage.get("deleteClaim", False)),
                            storage_class=storage.get("storageClassName") or None),
            namesrv_replicas=int(ns.get("replicas", 1)), namesrv_resources=dict(ns.get("resources") or {}),
            resources=dict(spec.get("resources") or {}),
            disable_consume_if_slow=bool(protection.get("disableConsumeIfConsumerReadSlowly", False)),
            consumer_fallbehind_threshold=to_bytes(protection.get("consumerFallbehindThreshold", "16Gi")),
            config={k: str(v) for k, v in (spec.get("config") or {}).items()},
            acl_enabled=bool((spec.get("acl") or {}).get("enabled", False)),
            tls_secret=tls.get("secretName") or (f"{res.name}-tls" if tls.get("issuerRef") else None),
            tls_issuer=((tls["issuerRef"]["name"], tls["issuerRef"].get("kind") or "Issuer")
                        if tls.get("issuerRef") else None),
            tls_mode=tls.get("mode") or "enforcing",
            replication=Replication(slaves_per_group=int(replication.get("slavesPerGroup", 0)),
                                    mode=replication.get("mode") or "Async",
                                    max_restart_lag_bytes=to_bytes(replication.get("maxRestartLagBytes", "1Mi")),
                                    failover=bool(replication.get("failover", False)),
                                    failover_timeout_seconds=int(replication.get("failoverTimeoutSeconds", 10)),
                                    spread=replication.get("spreadAcrossNodes") or "Preferred"),
            grpc_port=(int((spec.get("grpc") or {}).get("port", GRPC_PORT))
                       if (spec.get("grpc") or {}).get("enabled") else None),
            annotations=dict(res.annotations), deleting=res.deleting,
            api_version=obj.get("apiVersion", API_VERSION), kind=obj.get("kind", "Broker"),
        )

    @property
    def name(self) -> str:
        return self.names.broker

    @property
    def namespace(self) -> str:
        return self.names.namespace

    @property
    def namesrv_addresses(self) -> list[str]:
        """The name servers as the cluster's pods reach them (stable DNS names)."""
        return self.names.namesrv_addresses(self.namesrv_replicas)

    @property
    def paused(self) -> bool:
        return self.annotations.get(ANN_PAUSE, "").lower() == "true"

    @property
    def managed(self) -> bool:
        return self.annotations.get(ANN_MANAGED, "").lower() != "false"

    @property
    def restart_token(self) -> str:
        """The restart annotation's value: a new one restarts every broker pod."""
        return self.annotations.get(ANN_RESTART, "")

    def owner_reference(self) -> dict:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}
