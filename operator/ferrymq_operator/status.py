"""Status, conditions and Events of our resources, in one place (as Strimzi does).

Every reconcile ends in ``finish``: conditions are merged (a condition's lastTransitionTime
moves only when its status does), ``observedGeneration`` is the generation just looked at,
``appliedGeneration`` the last one whose spec reached its target, and the transitions a
person should notice become Events (Warnings when something is wrong).
"""

from __future__ import annotations

import kopf

from ferrymq_operator import conditions
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_MANAGED, ANN_PAUSE

# Condition types whose transitions become Events (the group's ConsumeDisabled/FallingBehind
# transitions get more specific Events from the policy decision instead).
EVENT_TYPES = {"Ready", "ScaleDownBlocked", "UnsupportedChange", "Restarting", "ReconciliationPaused"}
WARNING_WHEN_TRUE = {"ScaleDownBlocked", "UnsupportedChange"}


def annotation(obj, key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def is_paused(obj) -> bool:
    return (annotation(obj, ANN_PAUSE) or "").lower() == "true"


def is_unmanaged(obj) -> bool:
    return (annotation(obj, ANN_MANAGED) or "").lower() == "false"


def finish(body, patch: kopf.Patch, new: list[Condition], extra: dict, applied: bool = True) -> None:
    """Write status (conditions merged, observedGeneration) and post Events for transitions.
    ``applied``: the spec of this generation reached its target (else appliedGeneration stays)."""
    old = list((body.get("status") or {}).get("conditions") or [])
    merged = conditions.merge(old, new)
    had = {c["type"] for c in old}
    for c in conditions.transitions(old, merged):
        if c["type"] not in EVENT_TYPES or (c["type"] not in had and c["type"] != "Ready" and c["status"] != "True"):
            continue
        warning = (c["type"] == "Ready" and c["status"] != "True") or (c["type"] in WARNING_WHEN_TRUE and c["status"] == "True")
        kopf.event(body, type="Warning" if warning else "Normal", reason=f"{c['type']}{c['status']}",
                   message=c["message"] or c["reason"])
    patch.status["conditions"] = merged
    patch.status["observedGeneration"] = body["metadata"].get("generation")
    if applied:
        patch.status["appliedGeneration"] = body["metadata"].get("generation")
    for k, v in extra.items():
        patch.status[k] = v


def paused(body, patch: kopf.Patch) -> None:
    finish(body, patch, [Condition("ReconciliationPaused", True, "Annotated",
                                   f"{ANN_PAUSE}=true: nothing is reconciled until it is removed")], {})


def not_paused() -> Condition:
    return Condition("ReconciliationPaused", False, "NotPaused", "")


def not_ready(reason: str, message: str) -> Condition:
    return Condition("Ready", False, reason, message)


def broker_readiness(namesrv_replicas: int, replicas: int, ready: int, ns_ready: int, restarting: bool,
                     scale_blocked: bool) -> tuple[Condition, str]:
    """The Broker's Ready condition and phase from its StatefulSets' ready counts."""
    counts = f"{ready}/{replicas} brokers and {ns_ready}/{namesrv_replicas} name servers ready"
    if ready >= replicas and ns_ready >= namesrv_replicas:
        phase = "Restarting" if restarting else ("ScaleDownBlocked" if scale_blocked else "Ready")
        return Condition("Ready", True, "AllReplicasReady", counts), phase
    return Condition("Ready", False, "ReplicasNotReady", counts), ("Restarting" if restarting else "Pending")
