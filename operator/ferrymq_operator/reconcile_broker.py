"""Reconcile a Broker: its objects applied, scale-down gated on drained brokers, stale pods
restarted one at a time (writes drained first; with replication slaves first, and a master
only once its slaves caught up), status from what actually runs.

One reconcile is a row of named steps over one ``BrokerContext`` (the model, what was
observed, the conditions to report): plan_scaling, apply_objects, observe_pods,
restart_stale_pods, observe_readiness, report; the decisions among them (scale_condition,
plan_restarts, serving_masters, restarting_condition, readiness) are pure."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import kopf

from ferrymq_operator import broker_admin, conditions, kube, manifests, replication_roles, rollout, status, storage
from ferrymq_operator.cluster_access import admin_client
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_DRAIN_STARTED
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.reconcile_user import sync_acl
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.views import ClaimView, ObjectView, ResourceView, StatefulSetView

log = logging.getLogger("ferrymq.operator")

# A StatefulSet deleted with its pods orphaned (to be created anew) is normally gone within a
# second (the garbage collector drops the orphan finalizer); else the next reconcile creates it.
RECREATE_WAIT_SECONDS = 10.0


@dataclass
class BrokerContext:
    """One reconcile of a Broker: its model, what was observed, the conditions to report."""

    cluster: BrokerCluster
    previous: dict                                   # status as the last reconcile left it
    conditions: list[Condition] = field(default_factory=lambda: [status.not_paused()])  # Ready goes first
    scale: rollout.ScalePlan | None = None
    pods: list[dict] = field(default_factory=list)          # the master StatefulSet's pods
    slave_pods: list[dict] = field(default_factory=list)
    roles: list[replication_roles.GroupRoles] | None = None  # with replication: each group's roles
    restart: rollout.RestartPlan | None = None
    draining: str = ""                               # what the restart waits for, if anything
    ready: int = 0                                   # ready broker (master) pods
    namesrv_ready: int = 0

    @property
    def all_pods(self) -> list[dict]:
        return self.pods + self.slave_pods


# ---------------------------------------------------------------------------- pure decisions

def scale_condition(plan: rollout.ScalePlan) -> Condition:
    if plan.blocked:
        return Condition("ScaleDownBlocked", True, "BrokersNotDrained", plan.blocked)
    return Condition("ScaleDownBlocked", False, "NotBlocked", "")


def plan_restarts(ctx: BrokerContext) -> rollout.RestartPlan:
    """Pods whose config hash is stale, and which one to restart next (with replication slaves
    before masters, a master only once its slaves caught up)."""
    cluster, replicas = ctx.cluster, ctx.scale.replicas
    desired_hash = manifests.config_hash(cluster)
    if ctx.roles is None:
        return rollout.plan_restart(ctx.pods, desired_hash, replicas)
    max_lag = cluster.replication.max_restart_lag_bytes
    masters, slaves, undetermined = replication_roles.split_pods(ctx.roles, ctx.all_pods)
    return rollout.plan_replicated_restart(masters, slaves, desired_hash, replicas, cluster.replication.slaves_per_group,
                                           {g.master: g.behind(max_lag) for g in ctx.roles if g.observed}, max_lag,
                                           undetermined)


def serving_masters(ctx: BrokerContext) -> dict[str, str]:
    """Which brokerName each pod serving as master takes sends for: only those are drained first."""
    if ctx.roles is not None:
        return replication_roles.serving_masters(ctx.roles)
    return {name: name for name in replication_roles.pods_by_name(ctx.pods)}


def restarting_condition(restart: rollout.RestartPlan, draining: str) -> Condition:
    if not restart.stale:
        return Condition("Restarting", False, "UpToDate", "every broker pod runs the current configuration")
    waiting = draining or restart.waiting_reason
    return Condition("Restarting", True, "ConfigChanged", f"{len(restart.stale)} pod(s) to restart: "
                     f"{', '.join(restart.stale)}" + (f" ({waiting})" if waiting else ""))


def readiness(ctx: BrokerContext) -> tuple[Condition, dict]:
    """The Ready condition and the status fields (replication's are added by ``report``)."""
    cluster, replicas = ctx.cluster, ctx.scale.replicas
    ready_cond, phase = status.broker_readiness(cluster.namesrv_replicas, replicas, ctx.ready, ctx.namesrv_ready,
                                                bool(ctx.restart.stale), bool(ctx.scale.blocked),
                                                replicas * cluster.replication.slaves_per_group,
                                                sum(rollout.pod_ready(p) for p in ctx.slave_pods))
    return ready_cond, {"phase": phase, "replicas": replicas, "readyReplicas": ctx.ready,
                        "selector": manifests.selector_string(cluster, "broker"),
                        "nameServers": cluster.namesrv_addresses, "configHash": manifests.config_hash(cluster),
                        "replication": None}


# ---------------------------------------------------------------------------- steps with I/O

async def plan_scaling(ctx: BrokerContext, settings: OperatorSettings) -> None:
    """Scale: up at once; down only once the leaving brokers hold no unconsumed messages (their
    writes are turned off first)."""
    cluster, n = ctx.cluster, ctx.cluster.names
    current = StatefulSetView.of(await kube.get("apps/v1", "StatefulSet", cluster.namespace, n.broker_sts)).replicas
    backlog = None
    if current is not None and cluster.replicas < current:
        leaving = [n.broker_pod(i) for i in range(cluster.replicas, current)]
        try:
            async with admin_client(settings, cluster) as admin:
                await broker_admin.set_writable(admin, await broker_admin.brokers(admin, n.broker), leaving, False)
                backlog = await broker_admin.backlog(admin, n.broker, leaving)
        except Exception as e:  # noqa: BLE001 - any failure means "not known": refuse to shrink
            log.info("backlog of %s unknown: %s", leaving, e)
    ctx.scale = rollout.plan_scale(current, cluster.replicas, n.broker_pod, backlog)
    ctx.conditions.append(scale_condition(ctx.scale))


async def apply_objects(ctx: BrokerContext) -> None:
    """The ACL and TLS Secrets the pods need, claims grown, every object applied, and the
    objects the Broker no longer wants deleted."""
    cluster, n, ns = ctx.cluster, ctx.cluster.names, ctx.cluster.namespace
    if cluster.acl_enabled:  # the pods mount the ACL: it exists before they do
        await sync_acl(cluster)
    if cluster.tls_secret:
        ctx.conditions.append(await _tls_condition(cluster))
    ctx.conditions.append(await _expand_claims(cluster))
    if manifests.failover_on(cluster):
        state = manifests.controller_state_config_map(cluster)
        if await kube.get("v1", "ConfigMap", ns, n.controller_state) is None:
            await kube.create(state)
    for obj in manifests.all_objects(cluster, broker_replicas=ctx.scale.replicas):
        if obj["kind"] == "StatefulSet":
            await _apply_statefulset(obj)
        else:
            await kube.apply(obj)
    for api_version, kind, name in [*manifests.retired_slave_objects(cluster),
                                    *manifests.retired_controller_objects(cluster)]:
        if await kube.get(api_version, kind, ns, name) is not None:
            log.info("replication narrowed (fewer slaves, or failover off): deleting %s %s/%s (its claims are "
                     "kept)", kind, ns, name)
            await kube.delete(api_version, kind, ns, name)
    await _delete_stale_pdbs(cluster, ctx.scale.replicas)


async def observe_pods(ctx: BrokerContext, settings: OperatorSettings) -> None:
    """The broker and slave pods, and with replication each group's roles as its brokers say."""
    cluster, ns = ctx.cluster, ctx.cluster.namespace
    ctx.pods = await kube.list_("v1", "Pod", ns, manifests.selector_string(cluster, "broker"))
    ctx.slave_pods = [p for k in cluster.replication.slave_sets
                      for p in await kube.list_("v1", "Pod", ns, manifests.selector_string(cluster, manifests.slave_component(k)))]
    if cluster.replication.slaves_per_group:
        ctx.roles = await _group_roles(cluster, settings, ctx.scale.replicas, ctx.all_pods)


async def restart_stale_pods(ctx: BrokerContext, settings: OperatorSettings) -> None:
    """Health-gated restarts of pods whose config hash is stale (the StatefulSets are OnDelete)."""
    ctx.restart = plan_restarts(ctx)
    if ctx.roles is not None:
        ctx.conditions.append(status.master_restart_condition(ctx.restart))
    ctx.draining = await _controlled_restart(ctx.cluster, ctx.all_pods, ctx.restart.delete_next, serving_masters(ctx),
                                             settings)
    ctx.conditions.append(restarting_condition(ctx.restart, ctx.draining))


async def observe_readiness(ctx: BrokerContext) -> None:
    n, ns = ctx.cluster.names, ctx.cluster.namespace
    ctx.ready = StatefulSetView.of(await kube.get("apps/v1", "StatefulSet", ns, n.broker_sts)).ready_replicas
    ctx.namesrv_ready = StatefulSetView.of(await kube.get("apps/v1", "StatefulSet", ns, n.namesrv)).ready_replicas


def report(body, patch: kopf.Patch, ctx: BrokerContext) -> None:
    """Write the status: Ready first, status.replication, and MasterChanged Events."""
    ready_cond, fields = readiness(ctx)
    cluster = ctx.cluster
    if ctx.roles is not None:
        previous = ctx.previous.get("replication")
        fields["replication"] = status.replication_groups(
            cluster.replication.mode, cluster.replication.slaves_per_group, ctx.roles, ctx.all_pods,
            cluster.replication.max_restart_lag_bytes, cluster.replication.failover, previous, conditions.now_rfc3339())
        if cluster.replication.failover:
            changes = replication_roles.master_changes(previous, ctx.roles)
            for change in changes:
                log.info("group %s/%s: master moved from pod %s to pod %s (epoch %s)", cluster.namespace,
                         change.broker_name, change.from_pod, change.to_pod, change.epoch)
            status.master_changed_events(body, changes)
    status.finish(body, patch, [ready_cond, *ctx.conditions], fields)


async def reconcile_broker(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    if status.is_paused(body):
        return status.paused(body, patch)
    cluster = BrokerCluster.from_resource(dict(body), settings.broker_image)
    invalid = manifests.broker_conf_error(cluster)
    if invalid:
        # Nothing is applied: the running brokers keep the configuration they have.
        return status.finish(body, patch, [status.not_ready("InvalidConfig", invalid), status.not_paused()],
                             {"phase": "InvalidConfig"}, applied=False)
    ctx = BrokerContext(cluster, dict(ResourceView(body).status))
    await plan_scaling(ctx, settings)
    await apply_objects(ctx)
    await observe_pods(ctx, settings)
    await restart_stale_pods(ctx, settings)
    await observe_readiness(ctx)
    report(body, patch, ctx)


async def _delete_stale_pdbs(cluster: BrokerCluster, replicas: int) -> None:
    """PDBs the Broker no longer wants (per-set ones replaced by per-group ones, groups gone by
    a scale-down, the controllers' once failover is off): a pod under two PDBs cannot be evicted."""
    ns = cluster.namespace
    try:
        pdbs = await kube.list_("policy/v1", "PodDisruptionBudget", ns, manifests.instance_selector(cluster))
    except kube.ApiException as e:  # RBAC without list (rbac.create=false): keep them, reconcile the rest
        log.info("cannot list the PodDisruptionBudgets of %s/%s (%s %s): stale ones stay", ns, cluster.name,
                 e.status, e.reason)
        return
    for name in manifests.stale_disruption_budgets(cluster, [ObjectView(p).name for p in pdbs], replicas):
        log.info("deleting PodDisruptionBudget %s/%s (replaced, or its group is gone)", ns, name)
        await kube.delete("policy/v1", "PodDisruptionBudget", ns, name)


async def _apply_statefulset(obj: dict) -> None:
    """Apply a StatefulSet; when a field the API server will not change differs (the claim
    size of a raised spec.storage.size, the failover controllers' move from one pod with a
    claim to two without), delete it and create it anew instead of failing every reconcile.
    Broker pods are orphaned meanwhile and adopted by the new set (they keep running and keep
    their claims); the old failover controller goes with its set (Foreground) before the new
    ones start, so never two decide from different state."""
    desired = StatefulSetView(obj)
    ns, name = desired.namespace, desired.name
    current = await kube.get("apps/v1", "StatefulSet", ns, name)
    if current is not None and StatefulSetView(current).deleting:
        log.info("StatefulSet %s/%s is being replaced: created again once it is gone", ns, name)
        return
    reason = rollout.statefulset_recreate_reason(current, obj) if current is not None else ""
    if reason:
        controller = desired.component == "controller"
        policy = "Foreground" if controller else "Orphan"
        log.info("StatefulSet %s/%s: %s cannot change in place: deleting it (%s) to create it anew", ns, name,
                 reason, "with its pods" if controller else "its pods keep running")
        await kube.delete("apps/v1", "StatefulSet", ns, name, uid=StatefulSetView(current).uid, propagation=policy)
        if controller or not await _gone("apps/v1", "StatefulSet", ns, name, RECREATE_WAIT_SECONDS):
            return  # the next reconcile creates it
    await kube.apply(obj)


async def _gone(api_version: str, kind: str, ns: str, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while await kube.get(api_version, kind, ns, name) is not None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


async def _expand_claims(cluster: BrokerCluster) -> Condition:
    """spec.storage.size raised: grow the brokers' existing claims where their StorageClass
    allows it (storage.py); the condition says what holds which size."""
    size = cluster.storage.size
    try:
        claims = [c for c in await kube.list_("v1", "PersistentVolumeClaim", cluster.namespace,
                                              manifests.instance_selector(cluster))
                  if ClaimView(c).component in manifests.broker_components(cluster)]
        classes = {name: await kube.get_cluster("storage.k8s.io/v1", "StorageClass", name)
                   for name in storage.classes_to_read(claims, size)}
        plan = storage.plan_expansion(claims, size, classes)
        for name in plan.expand:
            log.info("expanding claim %s/%s to %s", cluster.namespace, name, size)
            await kube.patch_merge("v1", "PersistentVolumeClaim", cluster.namespace, name,
                                   storage.expansion_patch(size))
    except kube.ApiException as e:  # e.g. no right to read StorageClasses: say so, reconcile the rest
        return Condition("StorageResized", None, "ClaimsNotChecked",
                         f"could not check or expand the claims for storage.size {size}: {e.status} {e.reason}")
    return storage.storage_condition(plan)


async def _group_roles(cluster: BrokerCluster, settings: OperatorSettings, replicas: int,
                       pods: list[dict]) -> list[replication_roles.GroupRoles]:
    """Each group's roles and slave lag as its brokers report them; unknown where they cannot
    be asked (which holds back master restarts)."""
    n = cluster.names
    names = [n.broker_pod(i) for i in range(replicas)]
    try:
        async with admin_client(settings, cluster) as admin:
            observed = await broker_admin.group_members(admin, n.broker, names)
    except Exception as e:  # noqa: BLE001 - roles and lag are then unknown
        log.info("replication roles of %s unknown: %s", cluster.name, e)
        observed = {}
    return replication_roles.all_group_roles(replicas, cluster.replication.slaves_per_group, n.broker_pod,
                                             n.slave_pod, pods, observed, cluster.replication.failover)


async def _controlled_restart(cluster: BrokerCluster, pods: list[dict], next_pod: str | None,
                              serving: dict[str, str], settings: OperatorSettings) -> str:
    """Restart ``next_pod`` the controlled way (rollout.restart_step); give write permission back
    to pods whose drain was cancelled. Returns what the restart is waiting for, if anything."""
    ns = cluster.namespace
    kept = rollout.drained_but_kept(pods, next_pod)
    now = time.time()
    pod = replication_roles.pods_by_name(pods).get(next_pod) if next_pod else None
    drain = rollout.drain_seconds(next_pod, serving, cluster.replicas, settings.restart_drain_seconds) if next_pod else 0
    step = rollout.restart_step(pod, now, drain) if pod is not None else None
    if step and step.action == "drain":
        recent = rollout.settling(pods, now, settings.restart_drain_seconds)
        if recent:
            return f"waiting until clients route to {', '.join(recent)} again before draining {next_pod}"
    if kept or (step and step.action == "drain"):
        try:
            async with admin_client(settings, cluster) as admin:
                addrs = await broker_admin.brokers(admin, cluster.name)
                await broker_admin.set_writable(admin, addrs, [serving.get(name, name) for name in kept], True)
                for name in kept:
                    await kube.patch_merge("v1", "Pod", ns, name, {"metadata": {"annotations": {ANN_DRAIN_STARTED: None}}})
                    log.info("drain of %s/%s cancelled: write permission restored", ns, name)
                if step and step.action == "drain":
                    await broker_admin.set_writable(admin, addrs, [serving[next_pod]], False)
                    await kube.patch_merge("v1", "Pod", ns, next_pod,
                                           {"metadata": {"annotations": {ANN_DRAIN_STARTED: str(time.time())}}})
                    log.info("draining writes from %s/%s for %.0f s before its restart", ns, next_pod, step.seconds_left)
                    return f"draining writes from {next_pod} before its restart"
        except Exception as e:  # noqa: BLE001 - an unreachable broker takes no sends: restart it now
            log.info("could not drain %s/%s (%s); restarting it without a drain", ns, next_pod, e)
            step = rollout.RestartStep("delete") if step else None
    if step and step.action == "wait":
        return f"draining writes from {next_pod}, {step.seconds_left:.0f} s before its restart"
    if step and step.action == "delete":
        log.info("restarting %s/%s", ns, next_pod)
        await kube.delete("v1", "Pod", ns, next_pod)
    return ""


async def _tls_condition(cluster: BrokerCluster) -> Condition:
    """Request the certificate from cert-manager if asked to; report whether the TLS Secret the
    pods mount exists (they cannot start without it)."""
    if cluster.tls_issuer is not None:
        try:
            await kube.apply(manifests.certificate(cluster))
        except kube.ApiException as e:
            if e.status != 404:
                raise
            return Condition("TlsReady", False, "CertManagerMissing",
                             "spec.tls.issuerRef needs cert-manager, but the API server has no "
                             "certificates.cert-manager.io: install cert-manager or name a Secret in spec.tls.secretName")
    if await kube.get("v1", "Secret", cluster.namespace, cluster.tls_secret) is None:
        waiting = "cert-manager to issue it" if cluster.tls_issuer else "it to be created"
        return Condition("TlsReady", False, "SecretNotFound", f"Secret {cluster.tls_secret} does not exist yet: "
                                                              f"pods wait for {waiting}")
    return Condition("TlsReady", True, "SecretPresent", f"TLS {cluster.tls_mode} with Secret {cluster.tls_secret}")
