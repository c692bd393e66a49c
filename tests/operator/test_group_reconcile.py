"""The ConsumerGroup model and reconcile_group's named steps, each alone: the pure decisions
on a hand-made context, the broker steps against a fake admin client (no cluster)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from types import SimpleNamespace

import kopf
import pytest

from ferrymq.common.protocol import SubscriptionGroupConfig
from ferrymq_operator import reconcile_group as rg
from ferrymq_operator.broker_admin import QueueLag
from ferrymq_operator.conditions import Condition
from ferrymq_operator.groups import ConsumerGroup, GroupSpecError, ProtectionState

NOW = "2026-11-28T13:00:00Z"


def resource(name="billing", generation=2, annotations=None, **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "prod", "uid": "u1", "generation": generation,
                         "annotations": annotations or {}},
            "spec": {"brokerRef": {"name": "demo"}, **spec}}


def ctx_of(observed=None, applied_generation=2, state=None, **spec) -> rg.GroupContext:
    status = {"appliedGeneration": applied_generation}
    if state is not None:
        status["protection"] = state.to_status()
    ctx = rg.GroupContext.start(ConsumerGroup.from_resource(resource(**spec)), status)
    ctx.observed = observed or {}
    return ctx


def cfg(enable=True, **kw) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(group_name="billing", consume_enable=enable, **kw)


# ---------------------------------------------------------------------------- the model

def test_model_defaults_and_names():
    g = ConsumerGroup.from_resource(resource())
    assert (g.name, g.namespace, g.broker, g.group_name, g.generation) == ("billing", "prod", "demo", "billing", 2)
    assert (g.consume_enable, g.consume_broadcast_enable, g.retry_queue_nums, g.retry_max_times) == (True, True, 1, 16)
    assert g.on_fall_behind == "Disable" and not g.alerting and not g.spark_job and not g.enable_consume_requested
    named = ConsumerGroup.from_resource(resource(name="x", groupName="Billing_V2", protection={"onFallBehind": "Alert"},
                                                 annotations={"ferrymq.io/enable-consume": "True"}, sparkJob={"schedule": "@hourly"}))
    assert named.group_name == "Billing_V2" and named.alerting and named.enable_consume_requested and named.spark_job
    assert named.subscription(False) == SubscriptionGroupConfig(group_name="Billing_V2", consume_enable=False)


@pytest.mark.parametrize("spec, message", [
    ({"retryQueueNums": 0}, "spec.retryQueueNums must be an integer from 1 to 1024, not 0"),
    ({"retryMaxTimes": "3"}, "spec.retryMaxTimes must be an integer from 0 to 1000, not '3'"),
    ({"consumeEnable": "yes"}, "spec.consumeEnable must be true or false, not 'yes'"),
    ({"protection": {"onFallBehind": "Pause"}}, "unknown onFallBehind policy 'Pause'"),
    ({"groupName": "a.b"}, "spec.groupName: "),
    ({"brokerRef": {}}, "spec.brokerRef.name is required"),
])
def test_model_rejects_bad_values_with_the_field_named(spec, message):
    with pytest.raises(GroupSpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        ConsumerGroup.from_resource(resource(**spec))


def test_model_names_every_bad_value_at_once():
    with pytest.raises(GroupSpecError) as e:
        ConsumerGroup.from_resource(resource(name="a.b", retryQueueNums=2000))
    assert str(e.value).startswith("metadata.name: ") and "; spec.retryQueueNums" in str(e.value)


# ---------------------------------------------------------------------------- pure decisions

def test_context_reads_status_and_spec_generation():
    ctx = ctx_of(applied_generation=2, state=ProtectionState(True, NOW, ["b-0"]))
    assert not ctx.spec_changed and ctx.protection.tripped and ctx.fields == {"groupName": "billing"}
    assert ctx_of(applied_generation=1).spec_changed and ctx_of(applied_generation=None).spec_changed


def test_settings_to_push_creates_where_missing_and_leaves_consume_enable_to_protection():
    ctx = ctx_of({"b-0": None, "b-1": cfg(False), "b-2": cfg(True, retry_max_times=3), "b-3": cfg(True)})
    # b-1 was disabled by the broker's protection: same spec, nothing pushed there.
    assert rg.settings_to_push(ctx) == [("b-0", cfg(True)), ("b-2", cfg(True))]


def test_settings_to_push_with_a_new_spec_pushes_its_consume_enable():
    ctx = ctx_of({"b-0": cfg(True), "b-1": cfg(False)}, applied_generation=1, consumeEnable=False)
    assert rg.settings_to_push(ctx) == [("b-0", cfg(False))]


def test_observed_consume_enable_uses_the_spec_where_missing():
    assert ctx_of({"b-0": None, "b-1": cfg(False)}).enabled == {"b-0": True, "b-1": False}


def test_decide_protection_then_reset_and_pushes():
    ctx = ctx_of({"b-0": cfg(False), "b-1": cfg(True)}, protection={"onFallBehind": "ResetToLatest"})
    ctx.decision = rg.decide_protection(ctx, NOW)
    assert ctx.decision.reset_to_latest == ["b-0"] and ctx.decision.enable_on == ["b-0"]
    ctx.lag = [QueueLag("b-0", "t2", 5, None), QueueLag("b-0", "t1", 1, None), QueueLag("b-1", "t3", 9, None)]
    assert rg.topics_to_reset(ctx) == ["t1", "t2"]
    assert rg.consume_enable_to_push(ctx) == [("b-0", cfg(True))]


def test_decide_protection_honours_the_annotation_and_the_stored_trip():
    ctx = ctx_of({"b-0": cfg(False)}, state=ProtectionState(True, "earlier", ["b-0"]))
    assert rg.decide_protection(ctx, NOW).state.tripped_at == "earlier"
    ctx = ctx_of({"b-0": cfg(False)}, annotations={"ferrymq.io/enable-consume": "true"})
    d = rg.decide_protection(ctx, NOW)
    assert d.enable_on == ["b-0"] and d.clear_annotation


def test_no_decision_pushes_nothing():
    assert rg.consume_enable_to_push(ctx_of()) == [] and rg.topics_to_reset(ctx_of()) == []


def test_status_of_a_converged_group():
    ctx = ctx_of({"b-1": cfg(True), "b-0": cfg(False)}, protection={"onFallBehind": "Alert"})
    ctx.decision = rg.decide_protection(ctx, NOW)
    ctx.lag = [QueueLag("b-0", "t", 3, None), QueueLag("b-1", "%RETRY%billing", 7, None)]
    ctx.online = {"total": 1, "byProtocol": []}
    assert rg.status_fields(ctx) == {
        "consumeEnabled": False, "lag": [{"topic": "t", "messages": 3}], "totalLag": 3,
        "protection": {"tripped": True, "trippedAt": NOW, "brokers": ["b-0"]},
        "brokers": [{"name": "b-0", "consumeEnabled": False}, {"name": "b-1", "consumeEnabled": True}],
        "onlineClients": {"total": 1, "byProtocol": []}}
    ready, disabled, behind = rg.ready_conditions(ctx)
    assert ready == Condition("Ready", True, "Applied", "group billing on 2 broker(s)")
    assert (disabled.type, disabled.status, disabled.reason) == ("ConsumeDisabled", False, "Alerting")
    assert (behind.status, behind.reason) == (True, "Alerting")
    quiet = ctx_of({"b-0": cfg(True)})
    quiet.decision = rg.decide_protection(quiet, NOW)
    assert rg.ready_conditions(quiet)[2] == Condition("FallingBehind", False, "NotAlerting", "")
    assert rg.status_fields(quiet)["onlineClients"] is None  # unknown: a stale count is removed


# ---------------------------------------------------------------------------- steps with I/O

Queue = namedtuple("Queue", "broker_name topic")


@dataclass
class FakeAdmin:
    """What the group steps call on an AdminClient, over an in-memory table per broker address."""

    groups: dict[str, dict[str, SubscriptionGroupConfig]]
    lag: list[tuple[str, str, int]] = field(default_factory=list)  # (broker, topic, messages)
    calls: list[tuple] = field(default_factory=list)

    async def group_configs(self, addr):
        self.calls.append(("group_configs", addr))
        return dict(self.groups[addr])

    async def update_group(self, config, broker_addr):
        self.calls.append(("update_group", broker_addr, config.consume_enable))
        self.groups[broker_addr][config.group_name] = config

    async def consume_stats(self, group, cluster):
        if not self.lag:
            raise RuntimeError("no stats")
        return SimpleNamespace(offset_table={Queue(b, t): SimpleNamespace(lag=n) for b, t, n in self.lag})

    async def consumer_connections(self, group, cluster):
        return None

    async def reset_offset(self, group, topic, timestamp):
        self.calls.append(("reset_offset", topic))


ADDRS = {"b-0": "a0", "b-1": "a1"}


async def test_converge_creates_the_group_and_reads_back_once():
    admin = FakeAdmin({"a0": {}, "a1": {"billing": cfg(True)}})
    ctx = ctx_of()
    await rg.converge(admin, ADDRS, ctx, "demo")
    assert ("update_group", "a0", True) in admin.calls and admin.groups["a0"]["billing"] == cfg(True)
    assert [c[0] for c in admin.calls].count("group_configs") == 4  # observe, push, observe again
    assert ctx.enabled == {"b-0": True, "b-1": True} and ctx.decision.reason == "Enabled"
    assert ctx.lag == [] and ctx.online == {"total": 0, "byProtocol": [
        {"protocol": "remoting", "clients": 0}, {"protocol": "gRPC v2", "clients": 0}, {"protocol": "POP", "clients": 0}]}


async def test_converge_with_nothing_to_change_only_reads():
    admin = FakeAdmin({"a0": {"billing": cfg(True)}, "a1": {"billing": cfg(True)}})
    await rg.converge(admin, ADDRS, ctx_of(), "demo")
    assert {c[0] for c in admin.calls} == {"group_configs"}


async def test_converge_resets_and_re_enables_a_tripped_group():
    admin = FakeAdmin({"a0": {"billing": cfg(False)}, "a1": {"billing": cfg(True)}},
                      lag=[("b-0", "orders", 10), ("b-1", "audit", 2)])
    ctx = ctx_of(protection={"onFallBehind": "ResetToLatest"})
    await rg.converge(admin, ADDRS, ctx, "demo")
    assert ("reset_offset", "orders") in admin.calls and ("reset_offset", "audit") not in admin.calls
    assert ("update_group", "a0", True) in admin.calls and ctx.enabled == {"b-0": True, "b-1": True}


def test_report_posts_the_decision_and_writes_status(monkeypatch):
    events = []
    monkeypatch.setattr(kopf, "event", lambda body, **kw: events.append(kw))
    body = resource(annotations={"ferrymq.io/enable-consume": "true"})
    ctx = ctx_of({"b-0": cfg(False)}, annotations={"ferrymq.io/enable-consume": "true"})
    ctx.decision = rg.decide_protection(ctx, NOW)
    ctx.other_conditions.append(Condition("SparkJobReady", False, "NotConfigured"))
    patch = kopf.Patch()
    rg.report(body, patch, ctx)
    assert [e["reason"] for e in events] == ["ConsumeReEnabled", "ReadyTrue"]
    assert patch["metadata"]["annotations"] == {"ferrymq.io/enable-consume": None}
    st = patch["status"]
    assert [c["type"] for c in st["conditions"]] == ["Ready", "ConsumeDisabled", "FallingBehind", "SparkJobReady"]
    assert st["observedGeneration"] == st["appliedGeneration"] == 2 and st["groupName"] == "billing"


def test_report_of_an_early_end_keeps_the_applied_generation(monkeypatch):
    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    ctx = ctx_of()
    ctx.fields["sparkJob"] = None
    patch = kopf.Patch()
    rg.report(resource(), patch, ctx, Condition("Ready", False, "NoBrokers", "none yet"), applied=False)
    st = patch["status"]
    assert "appliedGeneration" not in st and st["observedGeneration"] == 2
    assert st["groupName"] == "billing" and st["sparkJob"] is None and "lag" not in st


async def test_an_invalid_spec_is_reported_without_contacting_anything(monkeypatch):
    async def no_broker(*a, **kw):
        raise AssertionError("the Broker was looked up")
    monkeypatch.setattr(rg, "broker_named", no_broker)
    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    patch = kopf.Patch()
    await rg.reconcile_group(resource(retryQueueNums=0), patch, None)
    ready = patch["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "retryQueueNums" in ready["message"]
    assert "appliedGeneration" not in patch["status"]
