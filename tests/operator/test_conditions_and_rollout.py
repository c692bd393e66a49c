"""Status conditions and the restart / scale-down planners."""

from __future__ import annotations

from ferrymq_operator import conditions, rollout
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import ANN_CONFIG_HASH
from ferrymq_operator.status import broker_readiness


def test_merge_keeps_transition_time_unless_status_flips():
    first = conditions.merge([], [Condition("Ready", False, "Pending", "0/1")], now="t1")
    assert first == [{"type": "Ready", "status": "False", "reason": "Pending", "message": "0/1", "lastTransitionTime": "t1"}]
    same = conditions.merge(first, [Condition("Ready", False, "StillPending", "0/1 again")], now="t2")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["reason"] == "StillPending"
    flipped = conditions.merge(same, [Condition("Ready", True, "AllReady")], now="t3")
    assert flipped[0]["status"] == "True" and flipped[0]["lastTransitionTime"] == "t3"
    unknown = conditions.merge(flipped, [Condition("Other", None, "NotChecked")], now="t4")
    assert [c["type"] for c in unknown] == ["Other", "Ready"] and unknown[0]["status"] == "Unknown"


def test_transitions_only_report_flips():
    old = conditions.merge([], [Condition("Ready", False, "a"), Condition("X", True, "b")], now="t")
    new = conditions.merge(old, [Condition("Ready", True, "c"), Condition("X", True, "d")], now="t2")
    assert [c["type"] for c in conditions.transitions(old, new)] == ["Ready"]
    assert conditions.transitions(new, new) == []
    assert conditions.is_true(new, "Ready") and not conditions.is_true(new, "Missing")


def pod(name: str, hash_: str, ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": name, "annotations": {ANN_CONFIG_HASH: hash_}}
    if deleting:
        meta["deletionTimestamp"] = "now"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_restart_one_stale_pod_at_a_time_highest_ordinal_first():
    pods = [pod("b-broker-0", "old"), pod("b-broker-1", "old"), pod("b-broker-2", "new")]
    plan = rollout.plan_restart(pods, "new", 3)
    assert plan.stale == ["b-broker-1", "b-broker-0"] and plan.delete_next == "b-broker-1"


def test_restart_waits_for_readiness_and_missing_pods():
    pods = [pod("b-broker-0", "old"), pod("b-broker-1", "new", ready=False)]
    plan = rollout.plan_restart(pods, "new", 2)
    assert plan.delete_next is None and "b-broker-1" in plan.waiting_reason
    plan = rollout.plan_restart([pod("b-broker-0", "old", deleting=True)], "new", 1)
    assert plan.delete_next is None
    plan = rollout.plan_restart([pod("b-broker-0", "old")], "new", 2)
    assert plan.delete_next is None and "1 pod(s) to be created" in plan.waiting_reason
    assert rollout.plan_restart([pod("b-broker-0", "new")], "new", 1) == rollout.RestartPlan([], None)
    assert rollout.plan_restart([pod("b-broker-10", "old"), pod("b-broker-9", "old")], "new", 2).delete_next == "b-broker-10"


def name(i: int) -> str:
    return f"b-broker-{i}"


def test_scale_up_and_first_creation_apply_at_once():
    assert rollout.plan_scale(None, 3, name, None) == rollout.ScalePlan(3)
    assert rollout.plan_scale(2, 4, name, None) == rollout.ScalePlan(4)


def test_scale_down_waits_for_drained_brokers():
    blocked = rollout.plan_scale(3, 1, name, {"b-broker-1": 0, "b-broker-2": 12})
    assert blocked.replicas == 3 and blocked.draining == ["b-broker-1", "b-broker-2"]
    assert "b-broker-2 holds 12 unconsumed" in blocked.blocked
    unknown = rollout.plan_scale(3, 2, name, None)
    assert unknown.replicas == 3 and "cannot read the backlog" in unknown.blocked
    done = rollout.plan_scale(3, 1, name, {"b-broker-1": 0, "b-broker-2": 0, "b-broker-0": 99})
    assert done == rollout.ScalePlan(1, ["b-broker-1", "b-broker-2"])


def test_broker_readiness():
    namesrvs = 2  # name servers wanted
    cond, phase = broker_readiness(namesrvs, 3, 3, 2, False, False)
    assert cond.status is True and phase == "Ready"
    cond, phase = broker_readiness(namesrvs, 3, 2, 2, False, False)
    assert cond.status is False and phase == "Pending" and "2/3 brokers" in cond.message
    assert broker_readiness(namesrvs, 3, 3, 2, True, False)[1] == "Restarting"
    assert broker_readiness(namesrvs, 3, 3, 2, False, True)[1] == "ScaleDownBlocked"
    assert broker_readiness(namesrvs, 1, 1, 1, False, False)[0].status is False


# ---------------------------------------------------------------- controlled restarts

def _draining_pod(name: str, started: str | None = None) -> dict:
    ann = {} if started is None else {"ferrymq.io/drain-started": started}
    return {"metadata": {"name": name, "annotations": ann}}


def test_restart_step_drains_first_then_waits_then_deletes():
    restart_step = rollout.restart_step
    assert restart_step(_draining_pod("b-1"), now=1000.0, drain_seconds=35).action == "drain"
    step = restart_step(_draining_pod("b-1", "1000.0"), now=1010.0, drain_seconds=35)
    assert (step.action, round(step.seconds_left)) == ("wait", 25)
    assert restart_step(_draining_pod("b-1", "1000.0"), now=1035.0, drain_seconds=35).action == "delete"
    assert restart_step(_draining_pod("b-1"), now=1000.0, drain_seconds=0).action == "delete", "0 turns the drain off"
    assert restart_step(_draining_pod("b-1", "garbage"), now=1000.0, drain_seconds=35).action == "drain"


def test_pods_whose_drain_was_cancelled_get_their_writes_back():
    drained_but_kept = rollout.drained_but_kept
    pods = [_draining_pod("b-0"), _draining_pod("b-1", "5"), _draining_pod("b-2", "7")]
    assert drained_but_kept(pods, restarting="b-1") == ["b-2"]
    assert drained_but_kept(pods, restarting=None) == ["b-1", "b-2"]


def test_next_drain_waits_until_restarted_brokers_are_back_in_client_routes():
    def ready_since(name, ts):
        return {"metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts}]}}
    pods = [ready_since("b-0", "2026-01-01T00:00:00Z"), ready_since("b-1", "2026-01-01T00:09:50Z")]
    at = 1767225600.0 + 600  # 2026-01-01T00:10:00Z
    assert rollout.settling(pods, at, 35) == ["b-1"]
    assert rollout.settling(pods, at + 30, 35) == []
