"""Topic planning and conflicts, the ConsumerGroup protection policy, lag, settings."""

from __future__ import annotations

import pytest

from ferrymq_operator import groups, topics
from ferrymq_operator.__main__ import kopf_args
from ferrymq_operator.groups import ProtectionState, decide
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.topics import DesiredTopic, ObservedTopic


def topic(name="orders", ns="prod", uid="u1", created="2026-01-01T00:00:00Z", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": created},
            "spec": {"brokerRef": {"name": "demo"}, **spec}}


def test_desired_topic_defaults_and_name():
    d = topics.desired_topic(topic())
    assert d == DesiredTopic("orders", 8, 8, 6, False)
    assert topics.desired_topic(topic(topicName="Orders_V2", readQueueNums=4)).name == "Orders_V2"
    with pytest.raises(ValueError, match="illegal characters"):
        topics.desired_topic(topic(name="a.b"))


def test_plan_brokers_creates_updates_and_refuses_shrinking():
    d = DesiredTopic("t", 8, 8, 6, False)
    plan = topics.plan_brokers(d, {"b-0": None, "b-1": ObservedTopic(8, 8, 6, False), "b-2": ObservedTopic(4, 8, 6, False),
                                   "b-3": ObservedTopic(16, 8, 6, False), "b-4": ObservedTopic(8, 8, 4, False)})
    assert [(a.broker, a.action) for a in plan] == [("b-0", "create"), ("b-1", "none"), ("b-2", "update"),
                                                    ("b-3", "refuse"), ("b-4", "update")]
    assert "readQueueNums 16 -> 8" in plan[3].reason


def test_conflicts_oldest_wins():
    a = topic("a", uid="1", created="2026-01-01T00:00:00Z", topicName="T")
    b = topic("b", uid="2", created="2026-01-02T00:00:00Z", topicName="T")
    other_broker = topic("c", uid="3", created="2025-01-01T00:00:00Z", topicName="T", brokerRef={"name": "x"})
    assert topics.conflict_owner(a, [a, b, other_broker]) is None
    assert topics.conflict_owner(b, [a, b, other_broker]) is a
    a_deleting = {**a, "metadata": {**a["metadata"], "deletionTimestamp": "now"}}
    assert topics.conflict_owner(b, [a_deleting, b]) is None


def test_desired_group():
    g = groups.ConsumerGroup.from_resource({"metadata": {"name": "billing"}, "spec": {
        "brokerRef": {"name": "demo"}, "retryQueueNums": 2, "retryMaxTimes": 3, "consumeBroadcastEnable": False}})
    cfg = g.subscription(False)
    assert (cfg.group_name, cfg.consume_enable, cfg.retry_queue_nums, cfg.retry_max_times, cfg.consume_broadcast_enable) == (
        "billing", False, 2, 3, False)
    assert groups.same_settings(cfg, g.subscription(True))
    with pytest.raises(ValueError):
        groups.ConsumerGroup.from_resource({"metadata": {"name": "a.b"}, "spec": {"brokerRef": {"name": "demo"}}})


NOW = "2026-11-21T06:00:00Z"


def run(policy, observed, state=ProtectionState(), spec_enabled=True, annotation=False):
    return decide(spec_enabled=spec_enabled, policy=policy, observed=observed, state=state,
                  enable_annotation=annotation, now=NOW)


def test_all_enabled_is_quiet():
    d = run("Disable", {"b-0": True, "b-1": True})
    assert (d.enable_on, d.disable_on, d.consume_disabled, d.event) == ([], [], False, None)


def test_disable_policy_leaves_the_broker_in_charge_until_a_person_acts():
    d = run("Disable", {"b-0": False, "b-1": True})
    assert d.enable_on == [] and d.consume_disabled and d.reason == "BrokerProtection"
    assert d.state.tripped and d.state.tripped_at == NOW and d.state.brokers == ["b-0"]
    assert d.event[0:2] == ("Warning", "ConsumeDisabled")
    again = run("Disable", {"b-0": False, "b-1": True}, state=d.state)
    assert again.event is None and again.enable_on == [] and again.state.tripped_at == NOW, "no event on resync"
    by_hand = run("Disable", {"b-0": False, "b-1": True}, state=d.state, annotation=True)
    assert by_hand.enable_on == ["b-0"] and by_hand.clear_annotation and not by_hand.consume_disabled
    # spec false then true: while false the trip is forgotten, so true re-enables.
    off = run("Disable", {"b-0": False, "b-1": True}, state=d.state, spec_enabled=False)
    assert off.disable_on == ["b-1"] and off.reason == "DisabledInSpec" and not off.state.tripped
    on = run("Disable", {"b-0": True, "b-1": True}, state=off.state)
    assert not on.consume_disabled


def test_reset_to_latest_skips_backlog_and_re_enables():
    d = run("ResetToLatest", {"b-0": False, "b-1": False})
    assert d.reset_to_latest == ["b-0", "b-1"] and d.enable_on == ["b-0", "b-1"]
    assert not d.consume_disabled and d.event[1] == "BacklogSkipped"


def test_alert_keeps_consuming_and_reports_once():
    d = run("Alert", {"b-0": False})
    assert d.enable_on == ["b-0"] and not d.consume_disabled and d.state.tripped and d.event[1] == "FallingBehind"
    again = run("Alert", {"b-0": False}, state=d.state)
    assert again.enable_on == ["b-0"] and again.event is None
    cleared = run("Alert", {"b-0": True}, state=again.state)
    assert not cleared.state.tripped and cleared.event[1] == "ConsumeEnabled"


def test_unknown_policy_is_an_error():
    with pytest.raises(ValueError, match="unknown onFallBehind"):
        run("Pause", {"b-0": True})


def test_protection_state_round_trips_through_status():
    s = ProtectionState(True, NOW, ["b-1", "b-0"])
    assert ProtectionState.from_status({"protection": s.to_status()}) == ProtectionState(True, NOW, ["b-0", "b-1"])
    assert ProtectionState.from_status(None) == ProtectionState()


def test_lag_by_topic():
    assert groups.lag_by_topic([("a", 3, 30), ("a", 2, 20), ("b", 5, None), ("b", -1, 4)]) == [
        {"topic": "a", "messages": 5, "bytes": 50}, {"topic": "b", "messages": 5}]


def test_settings_from_env_and_overrides():
    s = OperatorSettings.from_env({"FERRYMQ_NAMESRV_OVERRIDES": '{"ns/b": "127.0.0.1:1;127.0.0.1:2", "*": "x:1"}',
                                   "FERRYMQ_RESYNC_SECONDS": "5"})
    assert s.resync_seconds == 5.0
    assert s.namesrv_addr("ns", "b", ["in-cluster:9876"]) == "127.0.0.1:1;127.0.0.1:2"
    assert s.namesrv_addr("other", "b", ["in-cluster:9876"]) == "x:1"
    plain = OperatorSettings.from_env({})
    assert plain.namesrv_addr("ns", "b", ["a:9876", "b:9876"]) == "a:9876;b:9876"
    with pytest.raises(ValueError, match="not valid JSON"):
        OperatorSettings.from_env({"FERRYMQ_NAMESRV_OVERRIDES": "{nope"})
    with pytest.raises(ValueError, match="JSON object of strings"):
        OperatorSettings.from_env({"FERRYMQ_NAMESRV_OVERRIDES": '["x"]'})


def test_kopf_arguments():
    assert kopf_args({}) == ["run", "--standalone", "--all-namespaces", "-m", "ferrymq_operator.handlers"]
    assert kopf_args({"FERRYMQ_WATCH_NAMESPACES": "a, b", "FERRYMQ_LIVENESS_PORT": "8080"}) == [
        "run", "--standalone", "--namespace=a", "--namespace=b", "--liveness=http://0.0.0.0:8080/healthz",
        "-m", "ferrymq_operator.handlers"]
