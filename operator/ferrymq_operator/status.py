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
from ferrymq_operator.replication_lag import GroupLag
from ferrymq_operator.rollout import RestartPlan, pod_ready

# Condition types whose transitions become Events (the group's ConsumeDisabled/FallingBehind
# transitions get more specific Events from the policy decision instead).
EVENT_TYPES = {"Ready", "ScaleDownBlocked", "UnsupportedChange", "Restarting", "ReconciliationPaused",
               "MasterRestartBlocked"}
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
                     scale_blocked: bool, slaves: int = 0, slaves_ready: int = 0) -> tuple[Condition, str]:
    """The Broker's Ready condition and phase from its StatefulSets' ready counts (``slaves``:
    slave pods wanted over all groups)."""
    counts = f"{ready}/{replicas} brokers and {ns_ready}/{namesrv_replicas} name servers ready"
    if slaves:
        counts = f"{ready}/{replicas} brokers, {slaves_ready}/{slaves} slaves and {ns_ready}/{namesrv_replicas} name servers ready"
    if ready >= replicas and ns_ready >= namesrv_replicas and slaves_ready >= slaves:
        phase = "Restarting" if restarting else ("ScaleDownBlocked" if scale_blocked else "Ready")
        return Condition("Ready", True, "AllReplicasReady", counts), phase
    return Condition("Ready", False, "ReplicasNotReady", counts), ("Restarting" if restarting else "Pending")


def replication_groups(mode: str, slaves_per_group: int, replicas: int, master_pod, slave_pod,
                       pods: list[dict], lags: list[GroupLag] | None = None, max_lag_bytes: int = 0) -> dict:
    """status.replication: each broker group's master and slaves (pod names, whether Ready) and,
    with ``lags``, each slave's ``lagBytes`` and ``lagSeconds`` as its master reports them (absent
    while unknown) and the group's ``inSync``: every slave known to be within ``max_lag_bytes``."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    lag_of = {lag.master: lag for lag in lags or []}

    def member(name: str, broker_id: int) -> dict:
        pod = by_name.get(name)
        return {"pod": name, "brokerId": broker_id, "ready": bool(pod and pod_ready(pod))}

    groups = []
    for i in range(replicas):
        master = member(master_pod(i), 0)
        slaves = [member(slave_pod(k, i), k) for k in range(1, slaves_per_group + 1)]
        group = {"brokerName": master_pod(i), "master": master, "slaves": slaves,
                 "slavesReady": sum(s["ready"] for s in slaves)}
        if lags is not None:
            lag = lag_of.get(master_pod(i))
            for s in slaves:
                known = lag.slaves.get(s["pod"]) if lag is not None else None
                if known is not None:
                    s.update(lagBytes=known.bytes, lagSeconds=known.seconds)
            group["inSync"] = lag is not None and lag.in_sync(max_lag_bytes)
        groups.append(group)
    return {"mode": mode, "slavesPerGroup": slaves_per_group, "groups": groups}


def master_restart_condition(plan: RestartPlan) -> Condition:
    """MasterRestartBlocked: a stale master's restart waits until its slaves catch up (reason
    SlaveBehind, or SlaveLagUnknown when the master cannot tell), as Strimzi holds back a
    broker roll that would leave partitions under-replicated."""
    if plan.lag_blocked:
        return Condition("MasterRestartBlocked", True, plan.lag_blocked, plan.waiting_reason)
    return Condition("MasterRestartBlocked", False, "NotBlocked", "")
