"""reconcile_broker's named steps alone (the pure decisions on a hand-made context), and the
whole row of steps against an in-memory API server (no cluster, no brokers)."""

from __future__ import annotations

import kopf

from ferrymq_operator import manifests
from ferrymq_operator import reconcile_broker as rb
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_CONFIG_HASH
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.rollout import RestartPlan, ScalePlan
from ferrymq_operator.settings import OperatorSettings


def broker(replicas=2, **spec) -> dict:
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": "Broker",
            "metadata": {"name": "demo", "namespace": "prod", "uid": "u1", "generation": 3},
            "spec": {"replicas": replicas, **spec}}


def pod(name: str, hash_: str, ready: bool = True) -> dict:
    return {"metadata": {"name": name, "annotations": {ANN_CONFIG_HASH: hash_}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def ctx_of(replicas=2, scale=None, **spec) -> rb.BrokerContext:
    ctx = rb.BrokerContext(BrokerCluster.from_resource(broker(replicas, **spec)), {})
    ctx.scale = scale or ScalePlan(replicas)
    return ctx


# ---------------------------------------------------------------------------- pure decisions

def test_a_context_starts_with_not_paused():
    assert ctx_of().conditions == [Condition("ReconciliationPaused", False, "NotPaused", "")]


def test_scale_condition():
    assert rb.scale_condition(ScalePlan(2)) == Condition("ScaleDownBlocked", False, "NotBlocked", "")
    blocked = rb.scale_condition(ScalePlan(3, ["demo-broker-2"], "cannot read the backlog of demo-broker-2"))
    assert (blocked.status, blocked.reason, blocked.message) == (True, "BrokersNotDrained",
                                                                "cannot read the backlog of demo-broker-2")


def test_plan_restarts_without_replication_takes_the_highest_stale_pod():
    ctx = ctx_of()
    current = manifests.config_hash(ctx.cluster)
    ctx.pods = [pod("demo-broker-0", "old"), pod("demo-broker-1", "old")]
    plan = rb.plan_restarts(ctx)
    assert plan.stale == ["demo-broker-1", "demo-broker-0"] and plan.delete_next == "demo-broker-1"
    ctx.pods = [pod("demo-broker-0", current), pod("demo-broker-1", current)]
    assert rb.plan_restarts(ctx) == RestartPlan([], None)
    assert rb.serving_masters(ctx) == {"demo-broker-0": "demo-broker-0", "demo-broker-1": "demo-broker-1"}


def test_restarting_condition_says_what_it_waits_for():
    assert rb.restarting_condition(RestartPlan([], None), "") == Condition(
        "Restarting", False, "UpToDate", "every broker pod runs the current configuration")
    waiting = rb.restarting_condition(RestartPlan(["b-1"], None, "waiting for b-0 to be Ready"), "")
    assert waiting.message == "1 pod(s) to restart: b-1 (waiting for b-0 to be Ready)"
    draining = rb.restarting_condition(RestartPlan(["b-1"], "b-1", "ignored"), "draining writes from b-1")
    assert draining.message == "1 pod(s) to restart: b-1 (draining writes from b-1)"


def test_readiness_from_ready_counts():
    ctx = ctx_of(scale=ScalePlan(2))
    ctx.restart, ctx.ready, ctx.namesrv_ready = RestartPlan([], None), 2, 1
    ready, fields = rb.readiness(ctx)
    assert (ready.status, ready.reason, fields["phase"]) == (True, "AllReplicasReady", "Ready")
    assert fields == {"phase": "Ready", "replicas": 2, "readyReplicas": 2,
                      "selector": manifests.selector_string(ctx.cluster, "broker"),
                      "nameServers": ctx.cluster.namesrv_addresses, "configHash": manifests.config_hash(ctx.cluster),
                      "replication": None}
    ctx.ready, ctx.restart = 1, RestartPlan(["demo-broker-1"], None)
    ready, fields = rb.readiness(ctx)
    assert (ready.status, fields["phase"]) == (False, "Restarting")


# ---------------------------------------------------------------------------- the whole row

async def test_a_new_broker_gets_its_objects_and_a_status(fake_kube):
    body = broker(2)
    patch = kopf.Patch()
    await rb.reconcile_broker(body, patch, OperatorSettings.from_env({}))
    kinds = {k for k, _, _ in fake_kube.objects}
    assert {"ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget"} <= kinds
    st = patch["status"]
    assert [c["type"] for c in st["conditions"]] == ["Ready", "ReconciliationPaused", "ScaleDownBlocked",
                                                     "StorageResized", "Restarting"]
    assert [c["status"] for c in st["conditions"]] == ["False", "False", "False", "True", "False"]
    assert st["conditions"][0]["message"] == "0/2 brokers and 0/1 name servers ready"
    assert (st["phase"], st["replicas"], st["readyReplicas"], st["replication"]) == ("Pending", 2, 0, None)
    assert st["observedGeneration"] == st["appliedGeneration"] == 3 and fake_kube.deleted == []


async def test_an_invalid_config_applies_nothing(fake_kube):
    patch = kopf.Patch()
    await rb.reconcile_broker(broker(2, config={"flushDiskType": "SYNC"}), patch, OperatorSettings.from_env({}))
    assert fake_kube.objects == {} and patch["status"]["phase"] == "InvalidConfig"
    assert "appliedGeneration" not in patch["status"]
