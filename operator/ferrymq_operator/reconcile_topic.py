"""Reconcile a Topic: the broker-side topic created or updated on every broker of its
Broker (queue counts only grow), and deleted with the resource unless it is unmanaged."""

from __future__ import annotations

import kopf

from ferrymq_operator import broker_admin, kube, status, topics
from ferrymq_operator.cluster_access import admin_client, broker_of
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_MANAGED, API_VERSION
from ferrymq_operator.settings import OperatorSettings


async def reconcile_topic(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    if status.is_paused(res):
        return status.paused(body, patch)
    name = topics.topic_name(res)
    extra = {"topicName": name}
    if status.is_unmanaged(res):
        return status.finish(body, patch, [status.not_ready(
            "Unmanaged", f"{ANN_MANAGED}=false: the topic is left as it is on the brokers")], extra)
    cluster = await broker_of(res, settings)
    if cluster is None:
        return status.finish(body, patch, [status.not_ready(
            "BrokerNotFound", f"Broker {res['spec']['brokerRef']['name']} does not exist")], extra)
    others = await kube.list_(API_VERSION, "Topic", res["metadata"]["namespace"])
    owner = topics.conflict_owner(res, others)
    if owner is not None:
        return status.finish(body, patch, [status.not_ready(
            "Conflict", f"Topic {owner['metadata']['name']} already manages topic {name} on Broker {cluster.name}")], extra)
    desired = topics.desired_topic(res)
    try:
        async with admin_client(settings, cluster) as admin:
            addrs = await broker_admin.brokers(admin, cluster.name)
            if not addrs:
                return status.finish(body, patch, [status.not_ready("NoBrokers", "no broker of this Broker is registered yet")],
                                     extra)
            observed = await broker_admin.observe_topic(admin, addrs, name)
            actions = topics.plan_brokers(desired, observed)
            for a in actions:
                if a.action in ("create", "update"):
                    await broker_admin.apply_topic(admin, addrs[a.broker], desired)
            observed = await broker_admin.observe_topic(admin, addrs, name)
    except Exception as e:  # noqa: BLE001 - reported, retried by the timer
        return status.finish(body, patch, [status.not_ready("BrokerUnreachable", f"{type(e).__name__}: {e}")], extra)
    refused = [a.reason for a in actions if a.action == "refuse"]
    extra["brokers"] = [{"name": b, "readQueueNums": o.read_queues, "writeQueueNums": o.write_queues, "perm": o.perm}
                        for b, o in sorted(observed.items()) if o is not None]
    conds = [Condition("Ready", not refused, "Applied" if not refused else "UnsupportedChange",
                       f"topic {name} on {len(extra['brokers'])} broker(s)" if not refused else "; ".join(refused)),
             Condition("UnsupportedChange", bool(refused), "QueueCountDecrease" if refused else "None", "; ".join(refused))]
    status.finish(body, patch, conds, extra)


async def delete_topic(body, settings: OperatorSettings) -> None:
    """The Topic is being deleted: delete the broker-side topic, unless another Topic manages
    the same one or its Broker is going away anyway. Raises TemporaryError while unreachable."""
    res = dict(body)
    if status.is_unmanaged(res) or status.is_paused(res):
        return
    cluster = await broker_of(res, settings)
    if cluster is None or cluster.deleting:
        return  # the brokers go away with their Broker
    others = await kube.list_(API_VERSION, "Topic", res["metadata"]["namespace"])
    if topics.conflict_owner(res, others) is not None:
        return  # another Topic manages this broker-side topic
    try:
        async with admin_client(settings, cluster) as admin:
            await broker_admin.delete_topic(admin, topics.topic_name(res), cluster.name)
    except Exception as e:  # noqa: BLE001
        raise kopf.TemporaryError(f"cannot delete topic on the brokers yet: {e}", delay=10) from e
