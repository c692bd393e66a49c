"""Reconcile a ConsumerGroup: the subscription group on every broker of its Broker, the
broker-protection policy (groups.decide) applied to what the brokers report, the lag and the
online consumers by protocol (4.x remoting, 5.x gRPC, POP) read into status, and the group's
scheduled Spark job (spark_jobs.sync).

One reconcile is a row of small named steps over one ``GroupContext`` (the typed model, what
the brokers were seen to have, the status to write), as Strimzi shapes its reconcilers. The
decisions (``settings_to_push``, ``decide_protection``, ``topics_to_reset``,
``consume_enable_to_push``, ``ready_conditions``, ``status_fields``) are pure functions of the
context; the steps that call brokers or the API server only carry out what those decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import kopf

from ferrymq.client.admin import AdminClient
from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX, SubscriptionGroupConfig
from ferrymq_operator import broker_admin, conditions, groups, spark_jobs, status
from ferrymq_operator.cluster_access import admin_client, broker_named, broker_of, on_brokers
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_ENABLE_CONSUME, ANN_MANAGED
from ferrymq_operator.groups import ConsumerGroup, GroupDecision, GroupSpecError, ProtectionState
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.views import ResourceView

log = logging.getLogger("ferrymq.operator")

Push = tuple[str, SubscriptionGroupConfig]  # (brokerName, the config to push there)


@dataclass
class GroupContext:
    """One reconcile of a ConsumerGroup: its model, what was observed, what status to write."""

    group: ConsumerGroup
    protection: ProtectionState      # status.protection as the last reconcile left it
    spec_changed: bool               # this generation's spec has not reached the brokers yet
    fields: dict = field(default_factory=dict)            # status fields beside the conditions
    other_conditions: list[Condition] = field(default_factory=list)  # the Spark job's, reported last
    observed: dict[str, SubscriptionGroupConfig | None] = field(default_factory=dict)  # brokerName -> its group
    decision: GroupDecision | None = None
    lag: list[broker_admin.QueueLag] = field(default_factory=list)
    online: dict | None = None       # status.onlineClients; None: unknown

    @classmethod
    def start(cls, group: ConsumerGroup, current_status: dict) -> "GroupContext":
        return cls(group, ProtectionState.from_status(current_status),
                   spec_changed=current_status.get("appliedGeneration") != group.generation,
                   fields={"groupName": group.group_name})

    @property
    def enabled(self) -> dict[str, bool]:
        """consumeEnable per broker as observed (the spec's value where the group is missing)."""
        return {b: (g.consume_enable if g else self.group.consume_enable) for b, g in self.observed.items()}


# ---------------------------------------------------------------------------- pure decisions

def settings_to_push(ctx: GroupContext) -> list[Push]:
    """Create the group where missing and push settings changes. consumeEnable of an existing
    group is pushed only with a new spec: otherwise protection may own it (decide_protection)."""
    spec_enabled = ctx.group.consume_enable
    out = []
    for b, have in ctx.observed.items():
        want = ctx.group.subscription(spec_enabled if have is None or ctx.spec_changed else have.consume_enable)
        if have is None or not groups.same_settings(have, want) or (ctx.spec_changed and have.consume_enable != spec_enabled):
            out.append((b, want))
    return out


def decide_protection(ctx: GroupContext, now: str) -> GroupDecision:
    """The protection policy applied to the consumeEnable the brokers report."""
    return groups.decide(spec_enabled=ctx.group.consume_enable, policy=ctx.group.on_fall_behind,
                         observed=ctx.enabled, state=ctx.protection,
                         enable_annotation=ctx.group.enable_consume_requested, now=now)


def topics_to_reset(ctx: GroupContext) -> list[str]:
    """The topics whose offsets jump to the end: those with queues on the brokers the decision
    resets (policy ResetToLatest)."""
    resetting = ctx.decision.reset_to_latest if ctx.decision else []
    return sorted({q.topic for q in ctx.lag if q.broker in resetting})


def consume_enable_to_push(ctx: GroupContext) -> list[Push]:
    """consumeEnable the decision turns on or off, broker by broker."""
    d = ctx.decision
    if d is None:
        return []
    return [(b, ctx.group.subscription(b in d.enable_on)) for b in d.enable_on + d.disable_on]


def status_fields(ctx: GroupContext) -> dict:
    """status fields of a reconcile that reached the brokers (beside groupName and sparkJob)."""
    enabled = ctx.enabled
    lag = groups.lag_by_topic([(q.topic, q.messages, q.bytes) for q in ctx.lag
                               if not q.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)])
    return {"consumeEnabled": all(enabled.values()), "lag": lag, "totalLag": sum(e["messages"] for e in lag),
            "protection": ctx.decision.state.to_status(),
            "brokers": [{"name": b, "consumeEnabled": on} for b, on in sorted(enabled.items())],
            "onlineClients": ctx.online}  # None removes a stale count


def ready_conditions(ctx: GroupContext) -> list[Condition]:
    """Ready, ConsumeDisabled and FallingBehind of a reconcile that reached the brokers."""
    d, alerting = ctx.decision, ctx.group.alerting
    return [Condition("Ready", True, "Applied", f"group {ctx.group.group_name} on {len(ctx.observed)} broker(s)"),
            Condition("ConsumeDisabled", d.consume_disabled, d.reason, d.message),
            Condition("FallingBehind", d.state.tripped and alerting, d.reason if alerting else "NotAlerting",
                      d.message if alerting else "")]


# ---------------------------------------------------------------------------- steps with I/O

async def sync_spark_job(ctx: GroupContext, resource: dict, cluster: BrokerCluster | None, current_status: dict) -> None:
    """The Spark job's Kubernetes objects: first, as they do not depend on the brokers."""
    await spark_jobs.sync_into(resource, cluster, current_status, ctx.other_conditions, ctx.fields)


async def observe(admin: AdminClient, addrs: dict[str, str], ctx: GroupContext) -> None:
    ctx.observed = await broker_admin.observe_group(admin, addrs, ctx.group.group_name)


async def push(admin: AdminClient, addrs: dict[str, str], ctx: GroupContext, pushes: list[Push]) -> None:
    """Push the configs, then observe again what the brokers have (only if anything was pushed)."""
    for b, config in pushes:
        log.info("group %s on %s: %s (consumeEnable %s)", config.group_name, b,
                 "created" if ctx.observed.get(b) is None else "updated", config.consume_enable)
        await broker_admin.apply_group(admin, addrs[b], config)
    if pushes:
        await observe(admin, addrs, ctx)


async def read_lag_and_clients(admin: AdminClient, ctx: GroupContext, cluster: str) -> None:
    """The group's lag and online consumers; either unknown (not a failure) when not there."""
    name = ctx.group.group_name
    try:
        ctx.lag = await broker_admin.group_lag(admin, name, cluster)
    except Exception as e:  # noqa: BLE001 - a group that never consumed has no stats
        log.debug("no consume stats for %s: %s", name, e)
    try:
        ctx.online = groups.online_clients(await admin.consumer_connections(name, cluster=cluster))
    except Exception as e:  # noqa: BLE001 - reported as unknown (absent), not as a failure
        log.debug("no connection list for %s: %s", name, e)


async def converge(admin: AdminClient, addrs: dict[str, str], ctx: GroupContext, cluster: str) -> None:
    """The group on every broker in ``addrs`` as the spec and the protection policy want it."""
    await observe(admin, addrs, ctx)
    await push(admin, addrs, ctx, settings_to_push(ctx))
    ctx.decision = decide_protection(ctx, conditions.now_rfc3339())
    await read_lag_and_clients(admin, ctx, cluster)
    topics = topics_to_reset(ctx)
    if topics:
        log.info("group %s: offsets reset to the latest on %s (policy ResetToLatest)", ctx.group.group_name, ", ".join(topics))
        await broker_admin.reset_to_latest(admin, ctx.group.group_name, topics)
    await push(admin, addrs, ctx, consume_enable_to_push(ctx))


def report(body, patch: kopf.Patch, ctx: GroupContext, ready: Condition | None = None, applied: bool = True) -> None:
    """Write the status. ``ready``: a not-Ready condition that ended the reconcile early
    (``ctx.decision`` is then unused); without one, the converged group's status, its
    protection Event and the one-shot annotation cleared once honoured."""
    if ready is not None:
        return status.finish(body, patch, [ready, *ctx.other_conditions], ctx.fields, applied=applied)
    d = ctx.decision
    if d.event:
        kopf.event(body, type=d.event[0], reason=d.event[1], message=d.event[2])
    if d.clear_annotation:
        patch.metadata.annotations[ANN_ENABLE_CONSUME] = None
    status.finish(body, patch, [*ready_conditions(ctx), *ctx.other_conditions], {**ctx.fields, **status_fields(ctx)})


async def reconcile_group(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    if status.is_paused(res):
        return status.paused(body, patch)
    if status.is_unmanaged(res):
        return status.finish(body, patch, [status.not_ready(
            "Unmanaged", f"{ANN_MANAGED}=false: the group is left as it is on the brokers")],
            {"groupName": groups.group_name(res)})
    try:
        group = ConsumerGroup.from_resource(res)
    except GroupSpecError as e:
        return status.finish(body, patch, [status.not_ready("InvalidSpec", str(e))],
                             {"groupName": groups.group_name(res)}, applied=False)
    current = dict(ResourceView(res).status)
    ctx = GroupContext.start(group, current)
    cluster = await broker_named(group.namespace, group.broker, settings)
    await sync_spark_job(ctx, res, cluster, current)
    if cluster is None:
        return report(body, patch, ctx, status.not_ready("BrokerNotFound", f"Broker {group.broker} does not exist"))
    stopped = await on_brokers(settings, cluster, lambda admin, addrs: converge(admin, addrs, ctx, cluster.name))
    report(body, patch, ctx, stopped, applied=stopped is None)


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
