"""Reconcile a Broker: its objects applied, scale-down gated on drained brokers, stale pods
restarted one at a time (writes drained first; with replication slaves first, and a master
only once its slaves caught up), status from what actually runs."""

from __future__ import annotations

import asyncio
import logging
import time

import kopf

from ferrymq_operator import broker_admin, conditions, kube, manifests, replication_roles, rollout, status, storage
from ferrymq_operator.cluster_access import admin_client
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_DRAIN_STARTED, LABEL_COMPONENT
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.reconcile_user import sync_acl
from ferrymq_operator.settings import OperatorSettings

log = logging.getLogger("ferrymq.operator")

# A StatefulSet deleted with its pods orphaned (to be created anew) is normally gone within a
# second (the garbage collector drops the orphan finalizer); else the next reconcile creates it.
RECREATE_WAIT_SECONDS = 10.0


async def reconcile_broker(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    if status.is_paused(body):
        return status.paused(body, patch)
    cluster = BrokerCluster.from_resource(dict(body), settings.broker_image)
    invalid = manifests.broker_conf_error(cluster)
    if invalid:
        # Nothing is applied: the running brokers keep the configuration they have.
        return status.finish(body, patch, [status.not_ready("InvalidConfig", invalid), status.not_paused()],
                             {"phase": "InvalidConfig"}, applied=False)
    n, ns = cluster.names, cluster.namespace
    conds: list[Condition] = [status.not_paused()]

    # Scale: up at once; down only once the leaving brokers hold no unconsumed messages.
    sts = await kube.get("apps/v1", "StatefulSet", ns, n.broker_sts)
    current = sts["spec"]["replicas"] if sts else None
    backlog = None
    if current is not None and cluster.replicas < current:
        leaving = [n.broker_pod(i) for i in range(cluster.replicas, current)]
        try:
            async with admin_client(settings, cluster) as admin:
                await broker_admin.set_writable(admin, await broker_admin.brokers(admin, n.broker), leaving, False)
                backlog = await broker_admin.backlog(admin, n.broker, leaving)
        except Exception as e:  # noqa: BLE001 - any failure means "not known": refuse to shrink
            log.info("backlog of %s unknown: %s", leaving, e)
    plan = rollout.plan_scale(current, cluster.replicas, n.broker_pod, backlog)
    if plan.blocked:
        conds.append(Condition("ScaleDownBlocked", True, "BrokersNotDrained", plan.blocked))
    else:
        conds.append(Condition("ScaleDownBlocked", False, "NotBlocked", ""))

    if cluster.acl_enabled:  # the pods mount the ACL: it exists before they do
        await sync_acl(cluster)
    if cluster.tls_secret:
        conds.append(await _tls_condition(cluster))
    conds.append(await _expand_claims(cluster))
    if manifests.failover_on(cluster):
        state = manifests.controller_state_config_map(cluster)
        if await kube.get("v1", "ConfigMap", ns, state["metadata"]["name"]) is None:
            await kube.create(state)
    for obj in manifests.all_objects(cluster, broker_replicas=plan.replicas):
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
    await _delete_stale_pdbs(cluster, plan.replicas)

    # Health-gated restarts of pods whose config hash is stale (the StatefulSets are OnDelete);
    # with replication, slaves before masters.
    desired_hash = manifests.config_hash(cluster)
    selector = manifests.selector_string(cluster, "broker")
    pods = await kube.list_("v1", "Pod", ns, selector)
    slave_pods = [p for k in cluster.replication.slave_sets
                  for p in await kube.list_("v1", "Pod", ns, manifests.selector_string(cluster, manifests.slave_component(k)))]
    roles = None
    if cluster.replication.slaves_per_group:
        roles = await _group_roles(cluster, settings, plan.replicas, pods + slave_pods)
        max_lag = cluster.replication.max_restart_lag_bytes
        masters, slaves, undetermined = replication_roles.split_pods(roles, pods + slave_pods)
        restart = rollout.plan_replicated_restart(masters, slaves, desired_hash, plan.replicas,
                                                  cluster.replication.slaves_per_group,
                                                  {g.master: g.behind(max_lag) for g in roles if g.observed}, max_lag,
                                                  undetermined)
        conds.append(status.master_restart_condition(restart))
    else:
        restart = rollout.plan_restart(pods, desired_hash, plan.replicas)
    # Which brokerName each pod serving as master takes sends for: only those are drained first.
    serving = (replication_roles.serving_masters(roles) if roles is not None
               else {p["metadata"]["name"]: p["metadata"]["name"] for p in pods})
    draining = await _controlled_restart(cluster, pods + slave_pods, restart.delete_next, serving, settings)
    if restart.stale:
        waiting = draining or restart.waiting_reason
        conds.append(Condition("Restarting", True, "ConfigChanged",
                               f"{len(restart.stale)} pod(s) to restart: {', '.join(restart.stale)}"
                               + (f" ({waiting})" if waiting else "")))
    else:
        conds.append(Condition("Restarting", False, "UpToDate", "every broker pod runs the current configuration"))

    sts = await kube.get("apps/v1", "StatefulSet", ns, n.broker_sts) or {}
    ns_sts = await kube.get("apps/v1", "StatefulSet", ns, n.namesrv) or {}
    ready = (sts.get("status") or {}).get("readyReplicas", 0) or 0
    ns_ready = (ns_sts.get("status") or {}).get("readyReplicas", 0) or 0
    slaves_ready = sum(rollout.pod_ready(p) for p in slave_pods)
    ready_cond, phase = status.broker_readiness(cluster.namesrv_replicas, plan.replicas, ready, ns_ready,
                                                bool(restart.stale), bool(plan.blocked),
                                                plan.replicas * cluster.replication.slaves_per_group, slaves_ready)
    conds.insert(0, ready_cond)
    extra = {"phase": phase, "replicas": plan.replicas, "readyReplicas": ready, "selector": selector,
             "nameServers": cluster.namesrv_addresses, "configHash": desired_hash, "replication": None}
    if roles is not None:
        previous = (body.get("status") or {}).get("replication")
        extra["replication"] = status.replication_groups(
            cluster.replication.mode, cluster.replication.slaves_per_group, roles, pods + slave_pods,
            cluster.replication.max_restart_lag_bytes, cluster.replication.failover, previous, conditions.now_rfc3339())
        if cluster.replication.failover:
            changes = replication_roles.master_changes(previous, roles)
            for change in changes:
                log.info("group %s/%s: master moved from pod %s to pod %s (epoch %s)", ns, change.broker_name,
                         change.from_pod, change.to_pod, change.epoch)
            status.master_changed_events(body, changes)
    status.finish(body, patch, conds, extra)


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
    for name in manifests.stale_disruption_budgets(cluster, [p["metadata"]["name"] for p in pdbs], replicas):
        log.info("deleting PodDisruptionBudget %s/%s (replaced, or its group is gone)", ns, name)
        await kube.delete("policy/v1", "PodDisruptionBudget", ns, name)


async def _apply_statefulset(obj: dict) -> None:
    """Apply a StatefulSet; when a field the API server will not change differs (the claim
    size of a raised spec.storage.size, the failover controllers' move from one pod with a
    claim to two without), delete it and create it anew instead of failing every reconcile.
    Broker pods are orphaned meanwhile and adopted by the new set (they keep running and keep
    their claims); the old failover controller goes with its set (Foreground) before the new
    ones start, so never two decide from different state."""
    meta = obj["metadata"]
    ns, name = meta["namespace"], meta["name"]
    current = await kube.get("apps/v1", "StatefulSet", ns, name)
    if current is not None and current["metadata"].get("deletionTimestamp"):
        log.info("StatefulSet %s/%s is being replaced: created again once it is gone", ns, name)
        return
    reason = rollout.statefulset_recreate_reason(current, obj) if current is not None else ""
    if reason:
        controller = meta["labels"].get(LABEL_COMPONENT) == "controller"
        policy = "Foreground" if controller else "Orphan"
        log.info("StatefulSet %s/%s: %s cannot change in place: deleting it (%s) to create it anew", ns, name,
                 reason, "with its pods" if controller else "its pods keep running")
        await kube.delete("apps/v1", "StatefulSet", ns, name, uid=current["metadata"]["uid"], propagation=policy)
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
                  if (c["metadata"].get("labels") or {}).get(LABEL_COMPONENT) in manifests.broker_components(cluster)]
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
    pod = next((p for p in pods if p["metadata"]["name"] == next_pod), None)
    # A slave takes no sends: nothing to drain before restarting it (``serving``: pod -> the
    # brokerName it serves as master of; after a failover not the pod's own name).
    drain_seconds = settings.restart_drain_seconds if next_pod in serving else 0
    step = rollout.restart_step(pod, now, drain_seconds) if pod is not None else None
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
