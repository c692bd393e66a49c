"""The Topic model and reconcile_topic's named steps, each alone: the pure decisions on a
hand-made context, the broker steps against a fake admin client (no cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import kopf
import pytest

from ferrymq_operator import reconcile_topic as rt
from ferrymq_operator.conditions import Condition
from ferrymq_operator.topics import BrokerAction, DesiredTopic, ObservedTopic, Topic, TopicSpecError


def resource(name="orders", generation=2, uid="u1", created="2026-01-01T00:00:00Z", **spec) -> dict:
    return {"kind": "Topic", "metadata": {"name": name, "namespace": "prod", "uid": uid, "generation": generation,
                                          "creationTimestamp": created},
            "spec": {"brokerRef": {"name": "demo"}, **spec}}


def ctx_of(observed=None, **spec) -> rt.TopicContext:
    ctx = rt.TopicContext.start(Topic.from_resource(resource(**spec)))
    ctx.observed = observed or {}
    return ctx


# ---------------------------------------------------------------------------- the model

def test_model_defaults_and_names():
    t = Topic.from_resource(resource())
    assert (t.name, t.namespace, t.broker, t.topic_name, t.generation, t.uid) == ("orders", "prod", "demo", "orders", 2, "u1")
    assert (t.read_queues, t.write_queues, t.perm, t.order, t.deleting) == (8, 8, 6, False, False)
    assert t.desired == DesiredTopic("orders", 8, 8, 6, False)
    named = Topic.from_resource(resource(name="x", topicName="Orders_V2", readQueueNums=16, perm=4, order=True))
    assert named.desired == DesiredTopic("Orders_V2", 16, 8, 4, True)


@pytest.mark.parametrize("name, spec, message", [
    ("orders", {"readQueueNums": 0}, "spec.readQueueNums must be an integer from 1 to 1024, not 0"),
    ("orders", {"writeQueueNums": "8"}, "spec.writeQueueNums must be an integer from 1 to 1024, not '8'"),
    ("orders", {"perm": 5}, "spec.perm must be one of 2, 4, 6, not 5"),
    ("orders", {"order": "yes"}, "spec.order must be true or false, not 'yes'"),
    ("orders", {"topicName": "a.b"}, "spec.topicName: "),
    ("orders", {"brokerRef": {}}, "spec.brokerRef.name is required"),
    ("a.b", {"readQueueNums": 2000}, "metadata.name: "),  # every bad value at once:
    ("a.b", {"readQueueNums": 2000}, "; spec.readQueueNums must be an integer from 1 to 1024, not 2000"),
])
def test_model_names_each_bad_value(spec_error, name, spec, message):
    assert message in spec_error(Topic, TopicSpecError, resource(name, **spec))


# ---------------------------------------------------------------------------- pure decisions

def test_context_starts_with_the_topic_name():
    assert ctx_of(topicName="T").fields == {"topicName": "T"}


def test_plan_and_what_to_apply():
    ctx = ctx_of({"b-0": None, "b-1": ObservedTopic(8, 8, 6, False), "b-2": ObservedTopic(8, 8, 4, False),
                  "b-3": ObservedTopic(16, 8, 6, False)})
    ctx.actions = rt.plan(ctx)
    assert [a.action for a in ctx.actions] == ["create", "none", "update", "refuse"]
    assert rt.to_apply(ctx) == ["b-0", "b-2"]
    assert rt.refusals(ctx) == ["queue counts cannot decrease on b-3: readQueueNums 16 -> 8"]


def test_status_of_a_converged_topic():
    ctx = ctx_of({"b-1": ObservedTopic(8, 8, 6, False), "b-0": ObservedTopic(8, 8, 6, False), "b-2": None})
    ctx.actions = rt.plan(ctx)
    assert rt.status_fields(ctx) == {"brokers": [{"name": "b-0", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
                                                 {"name": "b-1", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}]}
    assert rt.ready_conditions(ctx) == [Condition("Ready", True, "Applied", "topic orders on 2 broker(s)"),
                                        Condition("UnsupportedChange", False, "None", "")]


def test_a_refused_shrink_is_an_unsupported_change():
    ctx = ctx_of({"b-0": ObservedTopic(8, 16, 6, False)})
    ctx.actions = rt.plan(ctx)
    why = "queue counts cannot decrease on b-0: writeQueueNums 16 -> 8"
    assert rt.ready_conditions(ctx) == [Condition("Ready", False, "UnsupportedChange", why),
                                        Condition("UnsupportedChange", True, "QueueCountDecrease", why)]


def test_conflict_condition():
    assert rt.conflict_condition(ctx_of(), "first", "demo") == Condition(
        "Ready", False, "Conflict", "Topic first already manages topic orders on Broker demo")


# ---------------------------------------------------------------------------- steps with I/O

@dataclass
class FakeAdmin:
    """What the topic steps call on an AdminClient, over an in-memory table per broker address."""

    topics: dict[str, dict[str, SimpleNamespace]]
    calls: list[tuple] = field(default_factory=list)

    async def topic_configs(self, addr):
        self.calls.append(("topic_configs", addr))
        return dict(self.topics[addr])

    async def create_topic(self, name, read_queues, write_queues, perm, order, broker_addr):
        self.calls.append(("create_topic", broker_addr))
        self.topics[broker_addr][name] = SimpleNamespace(read_queue_nums=read_queues, write_queue_nums=write_queues,
                                                         perm=perm, order=order)


def config(read=8, write=8, perm=6) -> SimpleNamespace:
    return SimpleNamespace(read_queue_nums=read, write_queue_nums=write, perm=perm, order=False)


ADDRS = {"b-0": "a0", "b-1": "a1"}


async def test_converge_creates_the_topic_and_reads_back_once():
    admin = FakeAdmin({"a0": {}, "a1": {"orders": config()}})
    ctx = ctx_of()
    await rt.converge(admin, ADDRS, ctx)
    assert [c for c in admin.calls if c[0] == "create_topic"] == [("create_topic", "a0")]
    assert [c[0] for c in admin.calls].count("topic_configs") == 4  # observe, push, observe again
    assert ctx.observed == {"b-0": ObservedTopic(8, 8, 6, False), "b-1": ObservedTopic(8, 8, 6, False)}
    assert ctx.actions == [BrokerAction("b-0", "create"), BrokerAction("b-1", "none")]


async def test_converge_with_nothing_to_change_only_reads():
    admin = FakeAdmin({"a0": {"orders": config()}, "a1": {"orders": config()}})
    await rt.converge(admin, ADDRS, ctx_of())
    assert {c[0] for c in admin.calls} == {"topic_configs"}


async def test_converge_never_shrinks_queues():
    admin = FakeAdmin({"a0": {"orders": config(read=16)}, "a1": {"orders": config(perm=4)}})
    ctx = ctx_of()
    await rt.converge(admin, ADDRS, ctx)
    assert ("create_topic", "a1") in admin.calls and ("create_topic", "a0") not in admin.calls
    assert ctx.observed["b-0"].read_queues == 16 and rt.refusals(ctx)


def test_report_of_a_converged_topic(monkeypatch):
    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    ctx = ctx_of({"b-0": ObservedTopic(8, 8, 6, False)})
    ctx.actions = rt.plan(ctx)
    patch = kopf.Patch()
    rt.report(resource(), patch, ctx)
    st = patch["status"]
    assert [c["type"] for c in st["conditions"]] == ["Ready", "UnsupportedChange"]
    assert st["observedGeneration"] == st["appliedGeneration"] == 2 and st["topicName"] == "orders"
    assert st["brokers"] == [{"name": "b-0", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}]


def test_report_of_an_early_end(monkeypatch):
    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    patch = kopf.Patch()
    rt.report(resource(), patch, ctx_of(), Condition("Ready", False, "NoBrokers", "none yet"))
    st = patch["status"]
    assert [(c["type"], c["reason"]) for c in st["conditions"]] == [("Ready", "NoBrokers")]
    assert st["topicName"] == "orders" and "brokers" not in st
    assert "appliedGeneration" not in st  # the spec reached no broker


async def test_find_conflict_names_the_older_topic(monkeypatch):
    first, second = resource("first", uid="1", topicName="T"), resource("second", uid="2", topicName="T",
                                                                          created="2026-02-01T00:00:00Z")

    async def list_(api_version, kind, ns, selector=None):
        assert (kind, ns) == ("Topic", "prod")
        return [first, second]
    monkeypatch.setattr(rt.kube, "list_", list_)
    assert await rt.find_conflict(second) == "first" and await rt.find_conflict(first) is None


async def test_an_invalid_spec_is_reported_without_contacting_anything(reconcile_invalid):
    st = await reconcile_invalid(rt, rt.reconcile_topic, resource(perm=7))
    ready = st["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "spec.perm" in ready["message"]
    assert "appliedGeneration" not in st and st["topicName"] == "orders"
