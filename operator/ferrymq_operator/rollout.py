"""Broker lifecycle decisions: which pod to restart next, and whether a scale-down may proceed.

Pure functions over plain pod/StatefulSet dicts, read through views.py; the reconcile steps
carry them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ferrymq_operator.views import PodView, StatefulSetView


def pod_ready(pod: dict) -> bool:
    return PodView(pod).ready


def _ordinal(pod: dict) -> int:
    return PodView(pod).ordinal


def _names(pods: list[dict]) -> list[str]:
    return [PodView(p).name for p in pods]


def _not_ready(pods: list[dict]) -> list[str]:
    return sorted(PodView(p).name for p in pods if not pod_ready(p))


@dataclass(frozen=True)
class RestartPlan:
    stale: list[str]              # pods whose config hash differs from the desired one
    delete_next: str | None       # the one pod to delete now, if it is safe
    waiting_reason: str = ""      # why nothing is deleted although pods are stale
    lag_blocked: str = ""         # SlaveBehind / SlaveLagUnknown: a master waits for its slaves


def plan_restart(pods: list[dict], desired_hash: str, replicas: int) -> RestartPlan:
    """One pod at a time, and only when every pod of the set exists and is Ready: a restart
    never takes a second broker down while another is still recovering. Highest ordinal
    first, like the StatefulSet controller's own rolling update."""
    stale = sorted((p for p in pods if PodView(p).config_hash != desired_hash), key=_ordinal, reverse=True)
    names = _names(stale)
    if not stale:
        return RestartPlan([], None)
    not_ready = _not_ready(pods)
    if not_ready:
        return RestartPlan(names, None, f"waiting for {', '.join(not_ready)} to be Ready")
    if len(pods) < replicas:
        return RestartPlan(names, None, f"waiting for {replicas - len(pods)} pod(s) to be created")
    return RestartPlan(names, names[0])


def plan_replicated_restart(masters: list[dict], slaves: list[dict], desired_hash: str, replicas: int,
                            slave_sets: int, behind: Mapping[str, Mapping[str, int | None]],
                            max_lag_bytes: int, undetermined: list[dict] | None = None) -> RestartPlan:
    """``plan_restart`` for master-slave groups: every broker pod (masters and slaves) exists and
    is Ready before any is restarted; stale slaves go first (they take no sends: no drain), a
    master only once every slave runs the current configuration and is Ready again, so a
    group never loses both copies at once and a restarted master finds its slaves there.
    And never a master whose slaves are behind: ``behind`` maps a master pod to its slave pods
    not known to be within ``max_lag_bytes`` of it (bytes behind, None when unknown: not
    connected, or the master could not be asked); a stale master with an empty entry may go.

    ``masters`` and ``slaves`` are the pods by the role they serve in now (after a failover a
    ``-sK`` pod may be the master: replication_roles.split_pods). ``undetermined``: pods of
    groups with failover whose master nobody could see, any of which may be serving as master:
    they are never restarted (reason RolesUnknown) until their roles are observed again."""
    undetermined = undetermined or []
    slave_plan = plan_restart(slaves, desired_hash, len(slaves))
    master_plan = plan_restart(masters, desired_hash, len(masters))
    held = plan_restart(undetermined, desired_hash, len(undetermined)).stale
    stale = slave_plan.stale + master_plan.stale + held
    if not stale:
        return RestartPlan([], None)
    everyone = masters + slaves + undetermined
    not_ready = _not_ready(everyone)
    if not_ready:
        return RestartPlan(stale, None, f"waiting for {', '.join(not_ready)} to be Ready")
    missing = replicas * (1 + slave_sets) - len(everyone)
    if missing > 0:
        return RestartPlan(stale, None, f"waiting for {missing} pod(s) to be created")
    if slave_plan.stale:
        return RestartPlan(stale, slave_plan.delete_next, slave_plan.waiting_reason)
    for master in master_plan.stale:  # highest ordinal first, skipping groups still catching up
        if not behind.get(master):
            return RestartPlan(stale, master)
    if not master_plan.stale:
        return RestartPlan(stale, None, f"restart of {', '.join(held)} waits until the operator sees which pod of "
                                        f"their group serves as master (no broker of the group answered as master; "
                                        f"with failover any of them may be it)", "RolesUnknown")
    first = master_plan.stale[0]
    lagging = behind[first]
    unknown = sorted(pod for pod, lag in lagging.items() if lag is None)
    detail = "; ".join([f"{pod} is {lag} bytes behind" if lag > max_lag_bytes else
                        f"{pod} is not in the controller's in-sync set yet"
                        for pod, lag in sorted(lagging.items()) if lag is not None]
                       + ([f"the lag of {', '.join(unknown)} is unknown (not connected to {first}, or {first} "
                           f"cannot be asked)"] if unknown else []))
    also = (f"; {', '.join(held)} wait until the operator sees which pod of their group serves as master"
            if held else "")
    return RestartPlan(stale, None, f"restart of master {first} waits for its slaves to catch up to within "
                                    f"{max_lag_bytes} bytes: {detail}{also}",
                       "SlaveLagUnknown" if len(unknown) == len(lagging) else "SlaveBehind")


def is_slave_pod(pod: dict) -> bool:
    return PodView(pod).is_slave


@dataclass(frozen=True)
class RestartStep:
    """What to do now with the pod ``plan_restart`` picked (a controlled restart, as Strimzi
    restarts Kafka brokers): revoke its write permission first, so producers move to the other
    brokers within one route refresh, wait ``drain_seconds``, and only then delete it."""

    action: str          # "drain" (revoke writes, mark the pod), "wait", or "delete"
    seconds_left: float = 0.0


def drain_seconds(next_pod: str, serving: Mapping[str, str], groups: int, configured: float) -> float:
    """How long to revoke ``next_pod``'s writes before its restart. A slave takes no sends
    (``serving``: pod -> the brokerName it serves as master of; after a failover not the pod's
    own name). Nor is a master drained when its group is the only one: a drain moves producers
    to the other groups, and with none it would only stop every write for its length (with
    failover the slave takes over within the failover timeout once the master is gone)."""
    return configured if next_pod in serving and groups > 1 else 0


def restart_step(pod: dict, now: float, drain_seconds: float) -> RestartStep:
    if drain_seconds <= 0:
        return RestartStep("delete")
    started = PodView(pod).drain_started
    try:
        since = float(started) if started is not None else None
    except ValueError:
        since = None
    if since is None:
        return RestartStep("drain", drain_seconds)
    left = since + drain_seconds - now
    return RestartStep("wait", left) if left > 0 else RestartStep("delete")


def settling(pods: list[dict], now: float, settle_seconds: float) -> list[str]:
    """Pods Ready for less than ``settle_seconds``: a broker that was drained and restarted is
    writable again, but clients learn that only at their next route refresh. Draining the next
    broker before then would leave producers no writable broker in their routes."""
    out = []
    for p in map(PodView, pods):
        since = p.ready_since
        if since is not None and now - since < settle_seconds:
            out.append(p.name)
    return sorted(out)


def drained_but_kept(pods: list[dict], restarting: str | None) -> list[str]:
    """Pods marked as draining that are no longer about to be restarted (the change was undone
    while they drained): their write permission must be given back."""
    return sorted(p.name for p in map(PodView, pods) if p.drain_started is not None and p.name != restarting)


@dataclass(frozen=True)
class ScalePlan:
    """What to set the broker StatefulSet's replicas to, and why."""

    replicas: int
    draining: list[str] = field(default_factory=list)  # brokerNames that must lose write permission
    blocked: str = ""                                     # non-empty: scale-down refused for now


def plan_scale(current: int | None, desired: int, pod_name, backlog: dict[str, int] | None) -> ScalePlan:
    """Scale-up applies at once. Scale-down removes the highest ordinals, but only once those
    brokers hold no unconsumed messages: first they are drained (write permission revoked so
    producers move to the others), then the set shrinks. ``backlog`` maps brokerName to its
    unconsumed message count (None: not known yet, e.g. the brokers are unreachable)."""
    if current is None or desired >= current:
        return ScalePlan(desired)
    leaving = [pod_name(i) for i in range(desired, current)]
    if backlog is None:
        return ScalePlan(current, leaving, "cannot read the backlog of " + ", ".join(leaving))
    pending = {b: backlog.get(b, 0) for b in leaving if backlog.get(b, 0) > 0}
    if pending:
        detail = ", ".join(f"{b} holds {n} unconsumed message(s)" for b, n in sorted(pending.items()))
        return ScalePlan(current, leaving, f"scale-down to {desired} waits for draining: {detail}")
    return ScalePlan(desired, leaving)


def statefulset_recreate_reason(current: dict, desired: dict) -> str:
    """Why the StatefulSet ``current`` cannot be patched into ``desired`` (a field the API server
    refuses to change: selector, serviceName, podManagementPolicy, volumeClaimTemplates); ""
    when it can. The operator then deletes it (its pods orphaned, or with it for the failover
    controllers) and creates it anew, rather than failing every reconcile."""
    cur, new = StatefulSetView(current), StatefulSetView(desired)
    changed = []
    if cur.selector_labels != new.selector_labels:
        changed.append("selector")
    if cur.service_name != new.service_name:
        changed.append("serviceName")
    if cur.pod_management_policy != new.pod_management_policy:
        changed.append(f"podManagementPolicy {cur.pod_management_policy} -> {new.pod_management_policy}")
    old_claims, new_claims = cur.claim_templates, new.claim_templates
    if old_claims != new_claims:
        sizes = {c.name: c.size for c in new_claims}
        if [c.name for c in old_claims] == [c.name for c in new_claims] and all(
                replace(c, size=sizes[c.name]) in new_claims for c in old_claims):
            changed.append("volumeClaimTemplates storage size")
        else:
            changed.append("volumeClaimTemplates")
    return ", ".join(changed)
