"""Reconcile a Topic: the broker-side topic created or updated on every broker of its
Broker (queue counts only grow), and deleted with the resource unless it is unmanaged; with
``spec.sparkJob``, a scheduled Spark job that publishes new input files to it (spark_jobs).

One reconcile is a row of small named steps over one ``TopicContext`` (the typed model, what
the brokers were seen to have, the status to write), as reconcile_group's. The decisions
(``plan``, ``to_apply``, ``refusals``, ``conflict_condition``, ``ready_conditions``,
``status_fields``) are pure functions of the context; the steps that call brokers or the API
server (``find_conflict``, ``observe``, ``push``, ``converge``, ``report``) carry them out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import kopf

from ferrymq.client.admin import AdminClient
from ferrymq_operator import broker_admin, kube, spark_jobs, status, topics
from ferrymq_operator.cluster_access import admin_client, broker_named, broker_of, on_brokers
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_MANAGED, API_VERSION
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.topics import BrokerAction, ObservedTopic, Topic, TopicSpecError
from ferrymq_operator.views import ResourceView

log = logging.getLogger("ferrymq.operator")


@dataclass
class TopicContext:
    """One reconcile of a Topic: its model, what was observed, what status to write."""

    topic: Topic
    fields: dict = field(default_factory=dict)      # status fields beside the conditions
    observed: dict[str, ObservedTopic | None] = field(default_factory=dict)  # brokerName -> its topic
    actions: list[BrokerAction] = field(default_factory=list)               # what each broker needs
    other_conditions: list[Condition] = field(default_factory=list)         # the publish job's, reported last

    @classmethod
    def start(cls, topic: Topic) -> "TopicContext":
        return cls(topic, {"topicName": topic.topic_name})


# ---------------------------------------------------------------------------- pure decisions

def plan(ctx: TopicContext) -> list[BrokerAction]:
    """Per broker: create, update, nothing, or refuse (queue counts never shrink)."""
    return topics.plan_brokers(ctx.topic.desired, ctx.observed)


def to_apply(ctx: TopicContext) -> list[str]:
    """The brokers the topic is created or updated on."""
    return [a.broker for a in ctx.actions if a.action in ("create", "update")]


def refusals(ctx: TopicContext) -> list[str]:
    """Why a broker keeps its topic as it is (a queue count the spec would lower)."""
    return [a.reason for a in ctx.actions if a.action == "refuse"]


def conflict_condition(ctx: TopicContext, owner: str, cluster: str) -> Condition:
    """Another Topic (``owner``, older) already manages this broker-side topic."""
    return status.not_ready("Conflict", f"Topic {owner} already manages topic {ctx.topic.topic_name} on Broker {cluster}")


def status_fields(ctx: TopicContext) -> dict:
    """status.brokers of a reconcile that reached the brokers: each broker's topic as observed."""
    return {"brokers": [{"name": b, "readQueueNums": o.read_queues, "writeQueueNums": o.write_queues, "perm": o.perm}
                        for b, o in sorted(ctx.observed.items()) if o is not None]}


def ready_conditions(ctx: TopicContext) -> list[Condition]:
    """Ready and UnsupportedChange of a reconcile that reached the brokers."""
    refused = refusals(ctx)
    why = "; ".join(refused)
    on = len(status_fields(ctx)["brokers"])
    return [Condition("Ready", not refused, "UnsupportedChange" if refused else "Applied",
                      why if refused else f"topic {ctx.topic.topic_name} on {on} broker(s)"),
            Condition("UnsupportedChange", bool(refused), "QueueCountDecrease" if refused else "None", why)]


# ---------------------------------------------------------------------------- steps with I/O

async def find_conflict(resource: dict) -> str | None:
    """The name of the (older) Topic that manages the same broker-side topic, if any."""
    others = await kube.list_(API_VERSION, "Topic", ResourceView(resource).namespace)
    owner = topics.conflict_owner(resource, others)
    return None if owner is None else ResourceView(owner).name


async def observe(admin: AdminClient, addrs: dict[str, str], ctx: TopicContext) -> None:
    ctx.observed = await broker_admin.observe_topic(admin, addrs, ctx.topic.topic_name)


async def push(admin: AdminClient, addrs: dict[str, str], ctx: TopicContext) -> None:
    """Create or update the topic where ``ctx.actions`` say, then observe again (only if any)."""
    brokers = to_apply(ctx)
    for b in brokers:
        log.info("topic %s on %s: %s", ctx.topic.topic_name, b, "created" if ctx.observed.get(b) is None else "updated")
        await broker_admin.apply_topic(admin, addrs[b], ctx.topic.desired)
    if brokers:
        await observe(admin, addrs, ctx)


async def converge(admin: AdminClient, addrs: dict[str, str], ctx: TopicContext) -> None:
    """The topic on every broker in ``addrs`` as the spec wants it, where that is allowed."""
    await observe(admin, addrs, ctx)
    ctx.actions = plan(ctx)
    await push(admin, addrs, ctx)


def report(body, patch: kopf.Patch, ctx: TopicContext, ready: Condition | None = None) -> None:
    """Write the status. ``ready``: a not-Ready condition that ended the reconcile early (the
    spec reached no broker: appliedGeneration stays, as for ConsumerGroups and Users);
    without one, the converged topic's."""
    if ready is not None:
        return status.finish(body, patch, [ready, *ctx.other_conditions], ctx.fields, applied=False)
    status.finish(body, patch, [*ready_conditions(ctx), *ctx.other_conditions], {**ctx.fields, **status_fields(ctx)})


async def reconcile_topic(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    if status.is_paused(res):
        return status.paused(body, patch)
    fields = {"topicName": topics.topic_name(res)}
    if status.is_unmanaged(res):
        return status.finish(body, patch, [status.not_ready(
            "Unmanaged", f"{ANN_MANAGED}=false: the topic is left as it is on the brokers")], fields)
    try:
        ctx = TopicContext.start(Topic.from_resource(res))
    except TopicSpecError as e:
        return status.finish(body, patch, [status.not_ready("InvalidSpec", str(e))], fields, applied=False)
    cluster = await broker_named(ctx.topic.namespace, ctx.topic.broker, settings)
    # The publish job's objects (spec.sparkJob): first, as they do not depend on the brokers.
    await spark_jobs.sync_into(res, cluster, dict(ResourceView(res).status), ctx.other_conditions, ctx.fields)
    if cluster is None:
        return report(body, patch, ctx, status.not_ready("BrokerNotFound", f"Broker {ctx.topic.broker} does not exist"))
    owner = await find_conflict(res)
    if owner is not None:
        return report(body, patch, ctx, conflict_condition(ctx, owner, cluster.name))
    stopped = await on_brokers(settings, cluster, lambda admin, addrs: converge(admin, addrs, ctx))
    report(body, patch, ctx, stopped)


async def delete_topic(body, settings: OperatorSettings) -> None:
    """The Topic is being deleted: delete the broker-side topic, unless another Topic manages
    the same one or its Broker is going away anyway. Raises TemporaryError while unreachable."""
    res = dict(body)
    if status.is_unmanaged(res) or status.is_paused(res):
        return
    cluster = await broker_of(res, settings)
    if cluster is None or cluster.deleting:
        return  # the brokers go away with their Broker
    if await find_conflict(res) is not None:
        return  # another Topic manages this broker-side topic
    try:
        async with admin_client(settings, cluster) as admin:
            await broker_admin.delete_topic(admin, topics.topic_name(res), cluster.name)
    except Exception as e:  # noqa: BLE001
        raise kopf.TemporaryError(f"cannot delete topic on the brokers yet: {e}", delay=10) from e
