"""Status, conditions and Events of our resources, in one place (as Strimzi does).

Every reconcile ends in ``finish``: conditions are merged (a condition's lastTransitionTime
moves only when its status does), ``observedGeneration`` is the generation just looked at,
``appliedGeneration`` the last one whose spec reached its target, and the transitions a
person should notice become Events (Warnings when something is wrong).
"""

from __future__ import annotations

import logging

import kopf

from ferrymq_operator import conditions
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_PAUSE
from ferrymq_operator.replication_roles import GroupRoles, MasterChange, pods_by_name, previous_groups
from ferrymq_operator.rollout import RestartPlan, pod_ready
from ferrymq_operator.views import ResourceView

# Condition types whose transitions become Events (the group's ConsumeDisabled/FallingBehind
# transitions get more specific Events from the policy decision instead).
EVENT_TYPES = {"Ready", "ScaleDownBlocked", "UnsupportedChange", "Restarting", "ReconciliationPaused",
               "MasterRestartBlocked", "StorageResized"}
WARNING_WHEN_TRUE = {"ScaleDownBlocked", "UnsupportedChange"}

log = logging.getLogger("ferrymq.operator")


def is_paused(obj) -> bool:
    return ResourceView(obj).paused


def is_unmanaged(obj) -> bool:
    return ResourceView(obj).unmanaged


def finish(body, patch: kopf.Patch, new: list[Condition], extra: dict, applied: bool = True) -> None:
    """Write status (conditions merged, observedGeneration) and post Events for transitions.
    ``applied``: the spec of this generation reached its target (else appliedGeneration stays)."""
    res = ResourceView(body)
    old = res.conditions
    merged = conditions.merge(old, new)
    had = {c["type"] for c in old}
    for c in conditions.transitions(old, merged):
        log.info("%s %s/%s: %s %s (%s)", res.kind or "resource", res.namespace, res.name, c["type"], c["status"],
                 c["reason"])
        if c["type"] not in EVENT_TYPES or (c["type"] not in had and c["type"] != "Ready" and c["status"] != "True"):
            continue
        warning = (c["type"] == "Ready" and c["status"] != "True") or (c["type"] in WARNING_WHEN_TRUE and c["status"] == "True")
        kopf.event(body, type="Warning" if warning else "Normal", reason=f"{c['type']}{c['status']}",
                   message=c["message"] or c["reason"])
    patch.status["conditions"] = merged
    patch.status["observedGeneration"] = res.generation
    if applied:
        patch.status["appliedGeneration"] = res.generation
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


def replication_groups(mode: str, slaves_per_group: int, groups: list[GroupRoles], pods: list[dict],
                       max_lag_bytes: int, failover: bool, previous: dict | None = None, now: str = "") -> dict:
    """status.replication: each broker group's master and slaves as they serve now (after a
    failover a ``-sK`` pod may be the master), whether Ready, with the id each is registered
    under; each slave's ``lagBytes`` and ``lagSeconds`` as the actual master reports them
    (absent while unknown); the group's ``inSync`` (every slave known to be within
    ``max_lag_bytes``) and ``rolesObserved``: False when no broker of the group answered as its
    master, and the master shown is then only the static layout's ``<broker>-broker-i``. With
    failover also the group's ``epoch``, ``lastObservedMaster`` (kept while roles are not
    observed) and ``lastMasterChange`` ({from, to, epoch, time}; ``previous``: the
    status.replication written before, ``now``: the time to stamp a change with)."""
    by_name = pods_by_name(pods)
    before = previous_groups(previous)

    def member(g: GroupRoles, name: str) -> dict:
        pod = by_name.get(name)
        out = {"pod": name, "ready": bool(pod and pod_ready(pod))}
        if name in g.broker_ids:
            out["brokerId"] = g.broker_ids[name]
        elif name == g.master and g.observed:
            out["brokerId"] = 0
        elif not failover:  # ids never move without failover
            out["brokerId"] = g.members.get(name, 0)
        return out

    out = []
    for g in groups:
        old = before.get(g.broker_name) or {}
        master = member(g, g.master)
        slaves = [member(g, name) for name in g.slaves]
        lag = g.lag
        for s in slaves:
            known = lag.slaves.get(s["pod"]) if lag is not None else None
            if known is not None:
                s.update(lagBytes=known.bytes, lagSeconds=known.seconds)
        group = {"brokerName": g.broker_name, "master": master, "slaves": slaves,
                 "slavesReady": sum(s["ready"] for s in slaves), "rolesObserved": g.observed,
                 "inSync": g.observed and lag is not None and lag.in_sync(max_lag_bytes)}
        if failover:
            if g.epoch is not None:
                group["epoch"] = g.epoch
            last = g.master if g.observed else old.get("lastObservedMaster")
            if last:
                group["lastObservedMaster"] = last
            change = old.get("lastMasterChange")
            if g.observed and old.get("lastObservedMaster") and old["lastObservedMaster"] != g.master:
                change = {"from": old["lastObservedMaster"], "to": g.master, "time": now,
                          **({"epoch": g.epoch} if g.epoch is not None else {})}
            if change:
                group["lastMasterChange"] = change
        out.append(group)
    return {"mode": mode, "slavesPerGroup": slaves_per_group, "groups": out}


def master_changed_events(body, changes: list[MasterChange]) -> None:
    """An Event MasterChanged per group whose observed master moved (a failover, or a
    controlled hand-over): from which pod to which."""
    for c in changes:
        epoch = f" (epoch {c.epoch})" if c.epoch is not None else ""
        kopf.event(body, type="Normal", reason="MasterChanged",
                   message=f"group {c.broker_name}: master moved from pod {c.from_pod} to pod {c.to_pod}{epoch}")


def master_restart_condition(plan: RestartPlan) -> Condition:
    """MasterRestartBlocked: a stale master's restart waits until its slaves catch up (reason
    SlaveBehind, or SlaveLagUnknown when the master cannot tell), as Strimzi holds back a
    broker roll that would leave partitions under-replicated; with failover, a group whose
    master nobody could see restarts none of the pods that may be it (RolesUnknown)."""
    if plan.lag_blocked:
        return Condition("MasterRestartBlocked", True, plan.lag_blocked, plan.waiting_reason)
    return Condition("MasterRestartBlocked", False, "NotBlocked", "")
