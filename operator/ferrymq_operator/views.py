"""Read-views of the Kubernetes objects the operator observes: a pod, a StatefulSet, a claim,
a StorageClass, a Secret, a CronJob and our own custom resources, each a small typed wrapper
over the dict the API server (or kopf) handed over, with named properties (``ready_replicas``,
``ready``, ``labels``, ``field(key)``) instead of ``obj.get("status", {}).get(...)`` chains
scattered through the reconcile code.

Views only read. Every property is missing-safe: a field the object does not have reads as
its zero value (None, 0, "", empty mapping), as the API server leaves out what is unset.
What the operator builds (manifests.py) stays plain dicts: builders produce, views read.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from ferrymq_operator.constants import (
    ANN_CONFIG_HASH,
    ANN_DRAIN_STARTED,
    ANN_MANAGED,
    ANN_PAUSE,
    LABEL_COMPONENT,
)
from ferrymq_operator.quantity import to_bytes

_EMPTY: Mapping[str, Any] = {}


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def epoch_seconds(timestamp: str | None) -> float | None:
    """An RFC 3339 time (``2026-11-28T13:00:00Z``) as epoch seconds; None if absent or unreadable."""
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def size_bytes(quantity: str | None) -> int | None:
    """A storage quantity in bytes; None if absent or unreadable."""
    try:
        return to_bytes(quantity) if quantity is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class ObjectView:
    """What every object has: metadata."""

    obj: Mapping[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None):
        """A view of ``obj``; of an empty object when None (every property reads as unset)."""
        return cls(obj if obj is not None else _EMPTY)

    @property
    def kind(self) -> str:
        return self.obj.get("kind") or ""

    @property
    def metadata(self) -> Mapping[str, Any]:
        return _mapping(self.obj.get("metadata"))

    @property
    def name(self) -> str:
        return self.metadata.get("name") or ""

    @property
    def namespace(self) -> str:
        return self.metadata.get("namespace") or ""

    @property
    def uid(self) -> str | None:
        return self.metadata.get("uid")

    @property
    def generation(self) -> int | None:
        return self.metadata.get("generation")

    @property
    def creation_timestamp(self) -> str:
        return self.metadata.get("creationTimestamp") or ""

    @property
    def deleting(self) -> bool:
        """metadata.deletionTimestamp is set."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self.metadata.get("annotations"))

    @property
    def component(self) -> str | None:
        """The app.kubernetes.io/component label."""
        return self.labels.get(LABEL_COMPONENT)

    def owned_by(self, uid: str) -> bool:
        """One of its ownerReferences points at ``uid``."""
        return any(ref.get("uid") == uid for ref in self.metadata.get("ownerReferences") or [])

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.obj.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.obj.get("status"))

    @property
    def conditions(self) -> list[dict]:
        return list(self.status.get("conditions") or [])

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)


@dataclass(frozen=True)
class ResourceView(ObjectView):
    """One of our custom resources (Broker, Topic, ConsumerGroup, User) before its typed model
    is built, or where a model is not needed (status, annotations, the Broker it names)."""

    @property
    def broker_ref(self) -> str:
        """spec.brokerRef.name ("" when unset): the Broker a Topic, ConsumerGroup or User names."""
        return dig(self.spec, "brokerRef", "name") or ""

    @property
    def paused(self) -> bool:
        return (self.annotations.get(ANN_PAUSE) or "").lower() == "true"

    @property
    def unmanaged(self) -> bool:
        return (self.annotations.get(ANN_MANAGED) or "").lower() == "false"


@dataclass(frozen=True)
class PodView(ObjectView):
    @property
    def ready(self) -> bool:
        """Its Ready condition is True and it is not being deleted."""
        return not self.deleting and self.ready_condition is not None

    @property
    def ready_condition(self) -> Mapping[str, Any] | None:
        """The Ready condition when True (None otherwise)."""
        c = self.condition("Ready")
        return c if c is not None and c.get("status") == "True" else None

    @property
    def ready_since(self) -> float | None:
        """When it last became Ready (epoch seconds), None when not Ready or not known."""
        return epoch_seconds((self.ready_condition or _EMPTY).get("lastTransitionTime"))

    @property
    def ips(self) -> set[str]:
        """status.podIP and every status.podIPs entry."""
        ips = {self.status.get("podIP")} | {entry.get("ip") for entry in self.status.get("podIPs") or []}
        return {ip for ip in ips if ip}

    @property
    def ordinal(self) -> int:
        """The StatefulSet ordinal its name ends with."""
        return int(self.name.rsplit("-", 1)[1])

    @property
    def config_hash(self) -> str | None:
        """The configuration it runs with (ferrymq.io/config-hash)."""
        return self.annotations.get(ANN_CONFIG_HASH)

    @property
    def drain_started(self) -> str | None:
        """When its writes were revoked before a restart (ferrymq.io/drain-started, epoch s)."""
        return self.annotations.get(ANN_DRAIN_STARTED)

    @property
    def is_slave(self) -> bool:
        """A pod of a slave set (component ``broker-sK``), not of the masters' (``broker``)."""
        return (self.component or "broker") != "broker"


@dataclass(frozen=True)
class ClaimTemplate:
    """What the API server compares in a StatefulSet's volumeClaimTemplates."""

    name: str
    size: int | None
    storage_class: str | None
    access_modes: tuple[str, ...]


@dataclass(frozen=True)
class StatefulSetView(ObjectView):
    @property
    def replicas(self) -> int | None:
        return self.spec.get("replicas")

    @property
    def ready_replicas(self) -> int:
        return self.status.get("readyReplicas") or 0

    @property
    def selector_labels(self) -> Mapping[str, str] | None:
        return dig(self.spec, "selector", "matchLabels")

    @property
    def service_name(self) -> str | None:
        return self.spec.get("serviceName")

    @property
    def pod_management_policy(self) -> str:
        return self.spec.get("podManagementPolicy") or "OrderedReady"

    @property
    def claim_templates(self) -> list[ClaimTemplate]:
        out = []
        for t in self.spec.get("volumeClaimTemplates") or []:
            claim = ClaimView(t)
            out.append(ClaimTemplate(claim.name, to_bytes(claim.requested) if claim.requested is not None else None,
                                     claim.storage_class, claim.access_modes))
        return out


@dataclass(frozen=True)
class ClaimView(ObjectView):
    """A PersistentVolumeClaim (or a StatefulSet's claim template)."""

    @property
    def requested(self) -> str | None:
        return dig(self.spec, "resources", "requests", "storage")

    @property
    def capacity(self) -> str | None:
        return dig(self.status, "capacity", "storage")

    @property
    def storage_class(self) -> str | None:
        return self.spec.get("storageClassName")

    @property
    def access_modes(self) -> tuple[str, ...]:
        return tuple(self.spec.get("accessModes") or ())

    @property
    def bound(self) -> bool:
        return self.status.get("phase") == "Bound"


@dataclass(frozen=True)
class StorageClassView(ObjectView):
    @property
    def allows_expansion(self) -> bool:
        return bool(self.obj.get("allowVolumeExpansion"))


@dataclass(frozen=True)
class SecretView(ObjectView):
    def field(self, key: str) -> str | None:
        """data[key] decoded (None when absent or empty)."""
        value = _mapping(self.obj.get("data")).get(key)
        return base64.b64decode(value).decode() if value else None


@dataclass(frozen=True)
class CronJobView(ObjectView):
    @property
    def schedule(self) -> str:
        return self.spec.get("schedule", "")

    @property
    def suspended(self) -> bool:
        return bool(self.spec.get("suspend"))
