"""Reconcile a ConsumerGroup: the subscription group on every broker of its Broker, the
broker-protection policy (groups.decide) applied to what the brokers report, the lag and the
online consumers by protocol (4.x remoting, 5.x gRPC, POP) read into status, and the group's scheduled Spark job (spark_jobs.sync)."""

from __future__ import annotations

import logging

import kopf

from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX
from ferrymq_operator import broker_admin, conditions, groups, spark_jobs, status
from ferrymq_operator.cluster_access import admin_client, broker_of
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_ENABLE_CONSUME, ANN_MANAGED
from ferrymq_operator.settings import OperatorSettings

log = logging.getLogger("ferrymq.operator")


async def reconcile_group(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    current = res.get("status") or {}
    if status.is_paused(res):
        return status.paused(body, patch)
    spec = res.get("spec") or {}
    name = groups.group_name(res)
    extra: dict = {"groupName": name}
    if status.is_unmanaged(res):
        return status.finish(body, patch, [status.not_ready(
            "Unmanaged", f"{ANN_MANAGED}=false: the group is left as it is on the brokers")], extra)
    cluster = await broker_of(res, settings)
    # The Spark job's Kubernetes objects first: they do not depend on the brokers being reachable.
    spark = await spark_jobs.sync(res, spark_jobs.in_cluster_namesrv(cluster) if cluster else None, current)
    spark_conds = [spark.condition] if spark.condition else []
    if spark.status_patch is not None or spark.remove_status:
        extra["sparkJob"] = spark.status_patch
    if cluster is None:
        return status.finish(body, patch, [status.not_ready(
            "BrokerNotFound", f"Broker {spec['brokerRef']['name']} does not exist"), *spark_conds], extra)
    spec_enabled = bool(spec.get("consumeEnable", True))
    policy = (spec.get("protection") or {}).get("onFallBehind", "Disable")
    state = groups.ProtectionState.from_status(current)
    annotation = (status.annotation(res, ANN_ENABLE_CONSUME) or "").lower() == "true"
    try:
        async with admin_client(settings, cluster) as admin:
            addrs = await broker_admin.brokers(admin, cluster.name)
            if not addrs:
                return status.finish(body, patch, [status.not_ready(
                    "NoBrokers", "no broker of this Broker is registered yet"), *spark_conds], extra, applied=False)
            observed = await broker_admin.observe_group(admin, addrs, name)
            # Create where missing, and push settings changes; consumeEnable on an existing
            # group is left to the policy below (the broker may own it after a trip).
            spec_changed = current.get("appliedGeneration") != res["metadata"].get("generation")
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
                lag = await broker_admin.group_lag(admin, name, cluster.name)
            except Exception as e:  # noqa: BLE001 - a group that never consumed has no stats
                log.debug("no consume stats for %s: %s", name, e)
            online: dict | None = None
            try:
                online = groups.online_clients(await admin.consumer_connections(name, cluster=cluster.name))
            except Exception as e:  # noqa: BLE001 - reported as unknown (absent), not as a failure
                log.debug("no connection list for %s: %s", name, e)
            if decision.reset_to_latest:
                await broker_admin.reset_to_latest(admin, name, sorted({q.topic for q in lag if q.broker in decision.reset_to_latest}))
            for b in decision.enable_on + decision.disable_on:
                await broker_admin.apply_group(admin, addrs[b], groups.desired_group(res, b in decision.enable_on))
            if decision.enable_on or decision.disable_on:
                observed = await broker_admin.observe_group(admin, addrs, name)
                enabled = {b: (g.consume_enable if g else spec_enabled) for b, g in observed.items()}
    except Exception as e:  # noqa: BLE001 - reported, retried by the timer
        return status.finish(body, patch, [status.not_ready("BrokerUnreachable", f"{type(e).__name__}: {e}"),
                                           *spark_conds], extra, applied=False)
    if decision.event:
        kopf.event(body, type=decision.event[0], reason=decision.event[1], message=decision.event[2])
    if decision.clear_annotation:
        patch.metadata.annotations[ANN_ENABLE_CONSUME] = None
    lag_entries = groups.lag_by_topic([(q.topic, q.messages, q.bytes) for q in lag
                                       if not q.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)])
    extra.update({"consumeEnabled": all(enabled.values()), "lag": lag_entries,
                  "totalLag": sum(e["messages"] for e in lag_entries), "protection": decision.state.to_status(),
                  "brokers": [{"name": b, "consumeEnabled": on} for b, on in sorted(enabled.items())]})
    extra["onlineClients"] = online  # None removes a stale count
    alerting = policy == "Alert"
    conds = [Condition("Ready", True, "Applied", f"group {name} on {len(enabled)} broker(s)"),
             Condition("ConsumeDisabled", decision.consume_disabled, decision.reason, decision.message),
             Condition("FallingBehind", decision.state.tripped and alerting, decision.reason if alerting else "NotAlerting",
                       decision.message if alerting else ""), *spark_conds]
    status.finish(body, patch, conds, extra)


async def delete_group(body, settings: OperatorSettings) -> None:
    """The ConsumerGroup is being deleted: delete the subscription group on the brokers (and
    its offsets), unless its Broker is going away anyway. Raises TemporaryError while unreachable."""
    res = dict(body)
    if status.is_unmanaged(res) or status.is_paused(res):
        return
    cluster = await broker_of(res, settings)
    if cluster is None or cluster.deleting:
        return
    try:
        async with admin_client(settings, cluster) as admin:
            await broker_admin.delete_group(admin, groups.group_name(res), cluster.name)
    except Exception as e:  # noqa: BLE001
        raise kopf.TemporaryError(f"cannot delete the group on the brokers yet: {e}", delay=10) from e
