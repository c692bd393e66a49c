"""Which pod of each broker group actually serves as its master, from what the brokers say.

With failover the roles move: a promoted ``<broker>-broker-sK-i`` pod serves as master
(brokerId 0) and the old master's pod ``<broker>-broker-i``, back, follows it as a slave. So
the operator asks every broker registered under a group's brokerName for its role
(broker_admin.group_members) and maps each answer to a pod: by the member identity a broker in
controller mode reports (``ferrymqHaIdentity``: the brokerId its pod was configured with),
else by the pod IP it registered with, else (failover off: roles never move) by the id it
registered under. The master is the pod whose broker says it is one (with failover, of the
highest epoch: a master cut off from the controller may still believe it is one). Nobody
answering as master: the status falls back to the static layout and says so
(``observed`` False), and with failover no pod that might be the master is restarted.
Pure functions over plain pod dicts and broker_admin's observations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ferrymq_operator.broker_admin import ObservedBroker
from ferrymq_operator.replication_lag import GroupLag, match_links, pod_ips
from ferrymq_operator.views import PodView

MASTER_ROLES = frozenset({"ASYNC_MASTER", "SYNC_MASTER"})


@dataclass(frozen=True)
class GroupRoles:
    """One broker group as it serves now."""

    broker_name: str
    master: str                     # the pod serving as master (the static one when not observed)
    slaves: list[str]               # every other pod of the group
    observed: bool                  # the master's own broker said it is master (else: static fallback)
    broker_ids: dict[str, int] = field(default_factory=dict)  # pod -> id registered under (observed only)
    roles: dict[str, str] = field(default_factory=dict)       # pod -> "master" / "slave" (observed only)
    epoch: int | None = None        # the master's epoch (failover), else the highest any member reported
    undetermined: list[str] = field(default_factory=list)     # failover, master unknown: pods that may be it
    lag: GroupLag | None = None     # each slave's lag as the actual master reports it
    members: dict[str, int] = field(default_factory=dict)     # pod -> the brokerId it was configured with

    def behind(self, max_bytes: int) -> dict[str, int | None]:
        """Slave pods not known to be within ``max_bytes`` of the actual master (None: unknown)."""
        if self.lag is None:
            return {pod: None for pod in self.slaves}
        return self.lag.behind(max_bytes)


def pods_by_name(pods: list[dict]) -> dict[str, dict]:
    return {PodView(p).name: p for p in pods}


def previous_groups(previous: dict | None) -> dict[str | None, dict]:
    """status.replication as written before: brokerName -> its group entry."""
    return {g.get("brokerName"): g for g in (previous or {}).get("groups") or []}


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]").removeprefix("::ffff:")


def pod_of(broker: ObservedBroker, members: Mapping[int, str], pods: Mapping[str, dict | None],
           failover: bool) -> str | None:
    """The pod ``broker`` runs in (``members``: configured brokerId -> pod name of the group)."""
    if broker.identity is not None:
        return members.get(broker.identity)
    host = _host(broker.address)
    by_ip = [name for name in members.values() if host in pod_ips(pods.get(name))]
    if len(by_ip) == 1:
        return by_ip[0]
    if not failover:  # ids never move without failover: the registered id is the pod's
        return members.get(broker.broker_id)
    return None


def group_roles(broker_name: str, members: Mapping[int, str], pods: Mapping[str, dict | None],
                observed: list[ObservedBroker] | None, failover: bool) -> GroupRoles:
    """One group's roles (``members``: configured brokerId -> pod, 0 the master pod of the
    static layout; ``pods``: pod name -> pod, None while not created; ``observed``: what the
    brokers registered under ``broker_name`` said, None when nothing is known)."""
    static_master = members[0]
    configured = {pod: broker_id for broker_id, pod in members.items()}
    seen: dict[str, ObservedBroker] = {}
    for broker in observed or []:
        pod = pod_of(broker, members, pods, failover)
        if pod is not None and (pod not in seen or (broker.reachable and not seen[pod].reachable)):
            seen[pod] = broker
    roles = {pod: ("master" if b.role in MASTER_ROLES else "slave") for pod, b in seen.items()
             if b.reachable and b.role}
    claims = sorted((pod for pod, role in roles.items() if role == "master"),
                    key=lambda pod: seen[pod].epoch or 0, reverse=True)
    if len(claims) > 1 and (seen[claims[0]].epoch or 0) == (seen[claims[1]].epoch or 0):
        claims = []  # two masters of the same epoch: not something to trust either way
    epochs = [b.epoch for b in seen.values() if b.epoch is not None]
    ids = {pod: b.broker_id for pod, b in seen.items() if b.reachable}
    if claims:
        master = claims[0]
        slaves = [pod for pod in members.values() if pod != master]
        for pod in slaves:
            roles[pod] = "slave"  # one master per group: whatever the others say, they do not serve as it
        links = match_links({pod: pods.get(pod) for pod in slaves}, seen[master].slaves)
        return GroupRoles(broker_name, master, slaves, True, ids, roles, seen[master].epoch, [],
                          GroupLag(master, links), configured)
    slaves = [pod for pod in members.values() if pod != static_master]
    undetermined = [pod for pod in members.values() if roles.get(pod) != "slave"] if failover else []
    return GroupRoles(broker_name, static_master, slaves, False, ids, roles, max(epochs, default=None), undetermined,
                      None, configured)


def all_group_roles(replicas: int, slaves_per_group: int, master_pod: Callable[[int], str],
                    slave_pod: Callable[[int, int], str], pods: list[dict],
                    observed: Mapping[str, list[ObservedBroker] | None], failover: bool) -> list[GroupRoles]:
    """Every group's roles (``observed``: brokerName, the static master pod's name, -> what its
    brokers said, as broker_admin.group_members gives it)."""
    by_name = pods_by_name(pods)
    out = []
    for i in range(replicas):
        members = {0: master_pod(i), **{k: slave_pod(k, i) for k in range(1, slaves_per_group + 1)}}
        out.append(group_roles(master_pod(i), members, {name: by_name.get(name) for name in members.values()},
                               observed.get(master_pod(i)), failover))
    return out


def split_pods(groups: list[GroupRoles], pods: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """The broker pods by the role they serve in now: (masters, slaves, undetermined), for
    rollout.plan_replicated_restart. Pods of no group (e.g. beyond the replicas) go with
    nobody."""
    by_name = pods_by_name(pods)
    masters, slaves, undetermined = [], [], []
    for g in groups:
        for name in [g.master, *g.slaves]:
            if name not in by_name:
                continue
            if name in g.undetermined:
                undetermined.append(by_name[name])
            elif name == g.master:
                masters.append(by_name[name])
            else:
                slaves.append(by_name[name])
    return masters, slaves, undetermined


def serving_masters(groups: list[GroupRoles]) -> dict[str, str]:
    """Pod -> the brokerName it takes sends for: the pods serving as master (the static master
    while roles are not observed and cannot have moved; with failover, none then: a pod whose
    role is not known is not restarted at all). Those are drained before a restart, by brokerName."""
    return {g.master: g.broker_name for g in groups if g.master not in g.undetermined}


@dataclass(frozen=True)
class MasterChange:
    broker_name: str
    from_pod: str
    to_pod: str
    epoch: int | None


def master_changes(previous: dict | None, groups: list[GroupRoles]) -> list[MasterChange]:
    """Groups whose observed master differs from the last one observed (``previous``: the
    status.replication written before, whose groups keep ``lastObservedMaster``)."""
    before = {name: g.get("lastObservedMaster") for name, g in previous_groups(previous).items()}
    return [MasterChange(g.broker_name, before[g.broker_name], g.master, g.epoch) for g in groups
            if g.observed and before.get(g.broker_name) and before[g.broker_name] != g.master]
