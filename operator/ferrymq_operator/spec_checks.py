"""What the typed models of the resources that name a Broker (groups.ConsumerGroup,
topics.Topic, acl.AclUser) share: their common fields (``BrokerChild``) and the checks they
run when they read a spec. Each check appends what is wrong to ``errors`` and returns the
default, so a model names every bad value at once (``raise_errors``). The CRDs' OpenAPI schemas
refuse these first; the checks guard objects stored before a rule existed and hand-made dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ferrymq_operator.views import ResourceView


class SpecError(ValueError):
    """A custom resource's spec the operator cannot act on (reported as Ready=False InvalidSpec)."""


def int_in(spec: Mapping[str, Any], key: str, default: int, low: int, high: int, errors: list[str],
           path: str = "spec") -> int:
    """``spec[key]`` (``default`` when unset), an integer from ``low`` to ``high``."""
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append(f"{path}.{key} must be an integer from {low} to {high}, not {value!r}")
        return default
    return value


def bool_of(spec: Mapping[str, Any], key: str, default: bool, errors: list[str], path: str = "spec") -> bool:
    """``spec[key]`` (``default`` when unset), true or false."""
    value = spec.get(key, default)
    if not isinstance(value, bool):
        errors.append(f"{path}.{key} must be true or false, not {value!r}")
        return default
    return value


def one_of(value: Any, allowed: tuple, what: str, errors: list[str]) -> Any:
    """``value`` if it is one of ``allowed``; else an error naming ``what`` (a field path)."""
    if value not in allowed:
        errors.append(f"{what} must be one of {', '.join(map(str, allowed))}, not {value!r}")
    return value


def broker_ref(spec: Mapping[str, Any], errors: list[str]) -> str:
    """spec.brokerRef.name, required."""
    ref = spec.get("brokerRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    if not name or not isinstance(name, str):
        errors.append("spec.brokerRef.name is required")
        return ""
    return name


def raise_errors(errors: list[str], error: type[SpecError]) -> None:
    if errors:
        raise error("; ".join(errors))


@dataclass(frozen=True, kw_only=True)
class BrokerChild:
    """The fields every model of a resource that names a Broker has."""

    name: str                       # the resource's name
    namespace: str
    broker: str                     # spec.brokerRef.name
    uid: str | None = None
    generation: int | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False          # metadata.deletionTimestamp is set

    @staticmethod
    def common(res: ResourceView, errors: list[str]) -> dict[str, Any]:
        """The common fields of ``res`` (spec.brokerRef.name checked into ``errors``)."""
        return {"name": res.name, "namespace": res.namespace or "default", "broker": broker_ref(res.spec, errors),
                "uid": res.uid, "generation": res.generation, "annotations": dict(res.annotations),
                "deleting": res.deleting}
