"""kopf handlers: thin glue between Kubernetes events and the pure decision functions.

Every resource has one reconcile function, called by its create/update/resume handlers and
by a resync timer, serialised per object by a lock in kopf's per-object memo. Reconciles
never raise for broker-side trouble: they record it as a condition and the next timer tick
tries again (kopf's own retry would hide the reason from ``kubectl get``).
"""

from __future__ import annotations

import asyncio
import logging
import time

import kopf

from ferrymq_operator import broker_admin, conditions, groups, kube, manifests, rollout, spark_jobs, topics
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import (
    ANN_DRAIN_STARTED,
    ANN_ENABLE_CONSUME,
    ANN_MANAGED,
    ANN_PAUSE,
    API_VERSION,
    FINALIZER,
    GROUP,
    VERSION,
)
from ferrymq_operator.settings import OperatorSettings

SETTINGS = OperatorSettings.from_env()
log = logging.getLogger("ferrymq.operator")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    kube.load_config()
    settings.persistence.finalizer = FINALIZER
    # Progress and diff-base in our own annotations: the CRDs' status schemas are strict and
    # would prune kopf's default status.kopf bookkeeping.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    # Watches end server-side after watch_timeout and are re-established; the client-side
    # timeout catches a connection that died without a FIN.
    settings.watching.server_timeout = SETTINGS.watch_timeout
    settings.watching.client_timeout = SETTINGS.watch_timeout + 30
    settings.watching.connect_timeout = 30
    # Events only where we post them explicitly (transitions), not one per log line.
    settings.posting.level = logging.CRITICAL + 1


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    if "lock" not in memo:
        memo["lock"] = asyncio.Lock()
    return memo["lock"]


def _annotation(body, key: str) -> str | None:
    return (body.get("metadata", {}).get("annotations") or {}).get(key)


def _paused(body) -> bool:
    return (_annotation(body, ANN_PAUSE) or "").lower() == "true"


def _unmanaged(body) -> bool:
    return (_annotation(body, ANN_MANAGED) or "").lower() == "false"


# Condition types whose transitions become Events (the group's ConsumeDisabled/FallingBehind
# transitions get more specific Events from the policy decision instead).
_EVENT_TYPES = {"Ready", "ScaleDownBlocked", "UnsupportedChange", "Restarting", "ReconciliationPaused"}
_WARNING_WHEN_TRUE = {"ScaleDownBlocked", "UnsupportedChange"}


def _finish(body, patch: kopf.Patch, status: dict, new: list[Condition], extra: dict, applied: bool = True) -> None:
    """Write status (conditions merged, observedGeneration) and post Events for transitions.
    ``applied``: the spec of this generation reached its target (else appliedGeneration stays)."""
    old = list(status.get("conditions") or [])
    merged = conditions.merge(old, new)
    had = {c["type"] for c in old}
    for c in conditions.transitions(old, merged):
        if c["type"] not in _EVENT_TYPES or (c["type"] not in had and c["type"] != "Ready" and c["status"] != "True"):
            continue
        warning = (c["type"] == "Ready" and c["status"] != "True") or (c["type"] in _WARNING_WHEN_TRUE and c["status"] == "True")
        kopf.event(body, type="Warning" if warning else "Normal", reason=f"{c['type']}{c['status']}",
                   message=c["message"] or c["reason"])
    patch.status["conditions"] = merged
    patch.status["observedGeneration"] = body["metadata"].get("generation")
    if applied:
        patch.status["appliedGeneration"] = body["metadata"].get("generation")
    for k, v in extra.items():
        patch.status[k] = v


def _paused_status(body, patch, status) -> None:
    _finish(body, patch, status, [Condition("ReconciliationPaused", True, "Annotated",
                                            f"{ANN_PAUSE}=true: nothing is reconciled until it is removed")], {})


def _not_paused() -> Condition:
    return Condition("ReconciliationPaused", False, "NotPaused", "")


# ============================================================================== Broker

def _namesrv_addr(namespace: str, broker: dict) -> str:
    n = manifests.names_of(broker)
    in_cluster = n.namesrv_addresses(manifests.spec_of(broker)["nameServer"]["replicas"])
    return SETTINGS.namesrv_addr(namespace, n.broker, in_cluster)


async def reconcile_broker(body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    async with _lock(memo):
        await _reconcile_broker(dict(body), body, patch)


async def _reconcile_broker(broker: dict, body, patch: kopf.Patch) -> None:
    status = broker.get("status") or {}
    if _paused(broker):
        return _paused_status(body, patch, status)
    if not (broker.get("spec") or {}).get("image"):
        broker.setdefault("spec", {})["image"] = SETTINGS.broker_image
    invalid = manifests.broker_conf_error(broker)
    if invalid:
        # Nothing is applied: the running brokers keep the configuration they have.
        return _finish(body, patch, status, [Condition("Ready", False, "InvalidConfig", invalid), _not_paused()],
                       {"phase": "InvalidConfig"}, applied=False)
    n, spec = manifests.names_of(broker), manifests.spec_of(broker)
    ns = n.namespace
    conds: list[Condition] = [_not_paused()]

    # Scale: up at once; down only once the leaving brokers hold no unconsumed messages.
    sts = await kube.get("apps/v1", "StatefulSet", ns, n.broker_sts)
    current = sts["spec"]["replicas"] if sts else None
    backlog = None
    if current is not None and spec["replicas"] < current:
        leaving = [n.broker_pod(i) for i in range(spec["replicas"], current)]
        try:
            async with broker_admin.connect(_namesrv_addr(ns, broker), SETTINGS.admin_timeout) as admin:
                addrs = await broker_admin.brokers(admin, n.broker)
                for name in leaving:
                    if name in addrs:
                        await broker_admin.revoke_write(admin, addrs[name])
                backlog = await broker_admin.backlog(admin, n.broker, leaving)
        except Exception as e:  # noqa: BLE001 - any failure means "not known": refuse to shrink
            log.info("backlog of %s unknown: %s", leaving, e)
    plan = rollout.plan_scale(current, spec["replicas"], n.broker_pod, backlog)
    if plan.blocked:
        conds.append(Condition("ScaleDownBlocked", True, "BrokersNotDrained", plan.blocked))
    else:
        conds.append(Condition("ScaleDownBlocked", False, "NotBlocked", ""))

    for obj in manifests.all_objects(broker, broker_replicas=plan.replicas):
        await kube.apply(obj)

    # Health-gated restarts of pods whose config hash is stale (the StatefulSet is OnDelete).
    desired_hash = manifests.config_hash(broker)
    pods = await kube.list_("v1", "Pod", ns, manifests.selector_string(broker, "broker"))
    restart = rollout.plan_restart(pods, desired_hash, plan.replicas)
    draining = await _controlled_restart(ns, broker, pods, restart.delete_next)
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
    ready_cond, phase = broker_readiness(spec, plan.replicas, ready, ns_ready, bool(restart.stale), bool(plan.blocked))
    conds.insert(0, ready_cond)
    _finish(body, patch, status, conds, {
        "phase": phase, "replicas": plan.replicas, "readyReplicas": ready,
        "selector": manifests.selector_string(broker, "broker"),
        "nameServers": n.namesrv_addresses(spec["nameServer"]["replicas"]),
        "configHash": desired_hash,
    })


async def _controlled_restart(ns: str, broker: dict, pods: list[dict], next_pod: str | None) -> str:
    """Restart ``next_pod`` the controlled way (rollout.restart_step); give write permission back
    to pods whose drain was cancelled. Returns what the restart is waiting for, if anything."""
    kept = rollout.drained_but_kept(pods, next_pod)
    now = time.time()
    step = rollout.restart_step(next(p for p in pods if p["metadata"]["name"] == next_pod), now,
                                SETTINGS.restart_drain_seconds) if next_pod else None
    if step and step.action == "drain":
        recent = rollout.settling(pods, now, SETTINGS.restart_drain_seconds)
        if recent:
            return f"waiting until clients route to {', '.join(recent)} again before draining {next_pod}"
    if kept or (step and step.action == "drain"):
        try:
            async with broker_admin.connect(_namesrv_addr(ns, broker), SETTINGS.admin_timeout) as admin:
                addrs = await broker_admin.brokers(admin, manifests.names_of(broker).broker)
                for name in kept:
                    if name in addrs:
                        await broker_admin.restore_write(admin, addrs[name])
                    await kube.patch_merge("v1", "Pod", ns, name, {"metadata": {"annotations": {ANN_DRAIN_STARTED: None}}})
                    log.info("drain of %s/%s cancelled: write permission restored", ns, name)
                if step and step.action == "drain":
                    if next_pod in addrs:
                        await broker_admin.revoke_write(admin, addrs[next_pod])
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


def broker_readiness(spec: dict, replicas: int, ready: int, ns_ready: int, restarting: bool,
                     scale_blocked: bool) -> tuple[Condition, str]:
    """The Broker's Ready condition and phase from its StatefulSets' ready counts."""
    want_ns = spec["nameServer"]["replicas"]
    if ready >= replicas and ns_ready >= want_ns:
        phase = "Restarting" if restarting else ("ScaleDownBlocked" if scale_blocked else "Ready")
        return Condition("Ready", True, "AllReplicasReady",
                         f"{ready}/{replicas} brokers and {ns_ready}/{want_ns} name servers ready"), phase
    return Condition("Ready", False, "ReplicasNotReady",
                     f"{ready}/{replicas} brokers and {ns_ready}/{want_ns} name servers ready"), (
        "Restarting" if restarting else "Pending")


@kopf.on.create(GROUP, VERSION, "brokers")
@kopf.on.update(GROUP, VERSION, "brokers")
@kopf.on.resume(GROUP, VERSION, "brokers")
async def broker_changed(body, patch, memo, **_) -> None:
    await reconcile_broker(body, patch, memo)


@kopf.timer(GROUP, VERSION, "brokers", interval=SETTINGS.broker_resync_seconds, initial_delay=1.0)
async def broker_resync(body, patch, memo, **_) -> None:
    await reconcile_broker(body, patch, memo)


# ============================================================================== Topic / ConsumerGroup shared

async def _broker_of(resource: dict) -> dict | None:
    ref = ((resource.get("spec") or {}).get("brokerRef") or {}).get("name")
    return await kube.get(API_VERSION, "Broker", resource["metadata"]["namespace"], ref) if ref else None


# ============================================================================== Topic

async def reconcile_topic(body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    async with _lock(memo):
        await _reconcile_topic(dict(body), body, patch)


async def _reconcile_topic(res: dict, body, patch: kopf.Patch) -> None:
    status = res.get("status") or {}
    if _paused(res):
        return _paused_status(body, patch, status)
    name = topics.topic_name(res)
    extra = {"topicName": name}
    if _unmanaged(res):
        return _finish(body, patch, status, [Condition("Ready", False, "Unmanaged",
                                                       f"{ANN_MANAGED}=false: the topic is left as it is on the brokers")], extra)
    broker = await _broker_of(res)
    if broker is None:
        return _finish(body, patch, status, [Condition("Ready", False, "BrokerNotFound",
                                                       f"Broker {res['spec']['brokerRef']['name']} does not exist")], extra)
    others = await kube.list_(API_VERSION, "Topic", res["metadata"]["namespace"])
    owner = topics.conflict_owner(res, others)
    if owner is not None:
        return _finish(body, patch, status, [Condition("Ready", False, "Conflict",
                                                       f"Topic {owner['metadata']['name']} already manages topic {name} "
                                                       f"on Broker {broker['metadata']['name']}")], extra)
    desired = topics.desired_topic(res)
    try:
        async with broker_admin.connect(_namesrv_addr(res["metadata"]["namespace"], broker), SETTINGS.admin_timeout) as admin:
            addrs = await broker_admin.brokers(admin, broker["metadata"]["name"])
            if not addrs:
                return _finish(body, patch, status, [Condition("Ready", False, "NoBrokers",
                                                               "no broker of this Broker is registered yet")], extra)
            observed = await broker_admin.observe_topic(admin, addrs, name)
            actions = topics.plan_brokers(desired, observed)
            for a in actions:
                if a.action in ("create", "update"):
                    await broker_admin.apply_topic(admin, addrs[a.broker], desired)
            observed = await broker_admin.observe_topic(admin, addrs, name)
    except Exception as e:  # noqa: BLE001 - reported, retried by the timer
        return _finish(body, patch, status, [Condition("Ready", False, "BrokerUnreachable", f"{type(e).__name__}: {e}")], extra)
    refused = [a.reason for a in actions if a.action == "refuse"]
    extra["brokers"] = [{"name": b, "readQueueNums": o.read_queues, "writeQueueNums": o.write_queues, "perm": o.perm}
                        for b, o in sorted(observed.items()) if o is not None]
    conds = [Condition("Ready", not refused, "Applied" if not refused else "UnsupportedChange",
                       f"topic {name} on {len(extra['brokers'])} broker(s)" if not refused else "; ".join(refused)),
             Condition("UnsupportedChange", bool(refused), "QueueCountDecrease" if refused else "None", "; ".join(refused))]
    _finish(body, patch, status, conds, extra)


@kopf.on.create(GROUP, VERSION, "topics")
@kopf.on.update(GROUP, VERSION, "topics")
@kopf.on.resume(GROUP, VERSION, "topics")
async def topic_changed(body, patch, memo, **_) -> None:
    await reconcile_topic(body, patch, memo)


@kopf.timer(GROUP, VERSION, "topics", interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds)
async def topic_resync(body, patch, memo, **_) -> None:
    await reconcile_topic(body, patch, memo)


@kopf.on.delete(GROUP, VERSION, "topics")
async def topic_deleted(body, memo, **_) -> None:
    res = dict(body)
    if _unmanaged(res) or _paused(res):
        return
    broker = await _broker_of(res)
    if broker is None or broker["metadata"].get("deletionTimestamp"):
        return  # the brokers go away with their Broker
    others = await kube.list_(API_VERSION, "Topic", res["metadata"]["namespace"])
    if topics.conflict_owner(res, others) is not None:
        return  # another Topic manages this broker-side topic
    async with _lock(memo):
        try:
            async with broker_admin.connect(_namesrv_addr(res["metadata"]["namespace"], broker), SETTINGS.admin_timeout) as admin:
                await broker_admin.delete_topic(admin, topics.topic_name(res), broker["metadata"]["name"])
        except Exception as e:  # noqa: BLE001
            raise kopf.TemporaryError(f"cannot delete topic on the brokers yet: {e}", delay=10) from e


# ============================================================================== ConsumerGroup

async def reconcile_group(body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    async with _lock(memo):
        await _reconcile_group(dict(body), body, patch)


async def _reconcile_group(res: dict, body, patch: kopf.Patch) -> None:
    status = res.get("status") or {}
    if _paused(res):
        return _paused_status(body, patch, status)
    spec = res.get("spec") or {}
    name = groups.group_name(res)
    extra: dict = {"groupName": name}
    if _unmanaged(res):
        return _finish(body, patch, status, [Condition("Ready", False, "Unmanaged",
                                                       f"{ANN_MANAGED}=false: the group is left as it is on the brokers")], extra)
    broker = await _broker_of(res)
    # The Spark job's Kubernetes objects first: they do not depend on the brokers being reachable.
    spark = await spark_jobs.sync(res, spark_jobs.in_cluster_namesrv(broker) if broker else None, status)
    spark_conds = [spark.condition] if spark.condition else []
    if spark.status_patch is not None or spark.remove_status:
        extra["sparkJob"] = spark.status_patch
    if broker is None:
        return _finish(body, patch, status, [Condition("Ready", False, "BrokerNotFound",
                                                       f"Broker {spec['brokerRef']['name']} does not exist"), *spark_conds],
                       extra)
    spec_enabled = bool(spec.get("consumeEnable", True))
    policy = (spec.get("protection") or {}).get("onFallBehind", "Disable")
    state = groups.ProtectionState.from_status(status)
    annotation = (_annotation(res, ANN_ENABLE_CONSUME) or "").lower() == "true"
    try:
        async with broker_admin.connect(_namesrv_addr(res["metadata"]["namespace"], broker), SETTINGS.admin_timeout) as admin:
            addrs = await broker_admin.brokers(admin, broker["metadata"]["name"])
            if not addrs:
                return _finish(body, patch, status, [Condition("Ready", False, "NoBrokers",
                                                               "no broker of this Broker is registered yet"), *spark_conds],
                               extra, applied=False)
            observed = await broker_admin.observe_group(admin, addrs, name)
            # Create where missing, and push settings changes; consumeEnable on an existing
            # group is left to the policy below (the broker may own it after a trip).
            spec_changed = status.get("appliedGeneration") != res["metadata"].get("generation")
            for b, have in observed.items():
                want = groups.desired_group(res, spec_enabled if have is None or spec_changed else have.consume_enable)
                if have is None or not groups.same_settings(have, want) or (spec_changed and have.consume_enable != spec_enabled):
                    await broker_admin.apply_group(admin, addrs[b], want)
            observed = await broker_admin.observe_group(admin, addrs, name)
            enabled = {b: (g.consume_enable if g else spec_enabled) for b, g in observed.items()}
            decision = groups.decide(spec_enabled=spec_enabled, policy=policy, observed=enabled, state=state,
                                     enable_annotation=annotation, now=conditions.now_rfc3339())
            lag: list[broker_admin.QueueLag] = []
            try:
                lag = await broker_admin.group_lag(admin, name, broker["metadata"]["name"])
            except Exception as e:  # noqa: BLE001 - a group that never consumed has no stats
                log.debug("no consume stats for %s: %s", name, e)
            if decision.reset_to_latest:
                await broker_admin.reset_to_latest(admin, name, sorted({q.topic for q in lag if q.broker in decision.reset_to_latest}))
            for b in decision.enable_on + decision.disable_on:
                await broker_admin.apply_group(admin, addrs[b], groups.desired_group(res, b in decision.enable_on))
            if decision.enable_on or decision.disable_on:
                observed = await broker_admin.observe_group(admin, addrs, name)
                enabled = {b: (g.consume_enable if g else spec_enabled) for b, g in observed.items()}
    except Exception as e:  # noqa: BLE001 - reported, retried by the timer
        return _finish(body, patch, status, [Condition("Ready", False, "BrokerUnreachable", f"{type(e).__name__}: {e}"),
                                             *spark_conds], extra, applied=False)
    if decision.event:
        kopf.event(body, type=decision.event[0], reason=decision.event[1], message=decision.event[2])
    if decision.clear_annotation:
        patch.metadata.annotations[ANN_ENABLE_CONSUME] = None
    lag_entries = groups.lag_by_topic([(q.topic, q.messages, q.bytes) for q in lag if not q.topic.startswith("%RETRY%")])
    extra.update({"consumeEnabled": all(enabled.values()), "lag": lag_entries,
                  "totalLag": sum(e["messages"] for e in lag_entries), "protection": decision.state.to_status(),
                  "brokers": [{"name": b, "consumeEnabled": on} for b, on in sorted(enabled.items())]})
    conds = [Condition("Ready", True, "Applied", f"group {name} on {len(enabled)} broker(s)"),
             Condition("ConsumeDisabled", decision.consume_disabled, decision.reason, decision.message),
             Condition("FallingBehind", decision.state.tripped and policy == "Alert", decision.reason if policy == "Alert" else "NotAlerting",
                       decision.message if policy == "Alert" else ""), *spark_conds]
    _finish(body, patch, status, conds, extra)


@kopf.on.create(GROUP, VERSION, "consumergroups")
@kopf.on.update(GROUP, VERSION, "consumergroups")
@kopf.on.resume(GROUP, VERSION, "consumergroups")
async def group_changed(body, patch, memo, **_) -> None:
    await reconcile_group(body, patch, memo)


@kopf.timer(GROUP, VERSION, "consumergroups", interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds)
async def group_resync(body, patch, memo, **_) -> None:
    await reconcile_group(body, patch, memo)


@kopf.on.delete(GROUP, VERSION, "consumergroups")
async def group_deleted(body, memo, **_) -> None:
    res = dict(body)
    if _unmanaged(res) or _paused(res):
        return
    broker = await _broker_of(res)
    if broker is None or broker["metadata"].get("deletionTimestamp"):
        return
    async with _lock(memo):
        try:
            async with broker_admin.connect(_namesrv_addr(res["metadata"]["namespace"], broker), SETTINGS.admin_timeout) as admin:
                await broker_admin.delete_group(admin, groups.group_name(res), broker["metadata"]["name"])
        except Exception as e:  # noqa: BLE001
            raise kopf.TemporaryError(f"cannot delete the group on the brokers yet: {e}", delay=10) from e
