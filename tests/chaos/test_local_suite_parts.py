"""The pure parts of the local chaos suite (e2e/chaos/faults.py, e2e/chaos/attribution.py): the
fault plan drawn from a seed, and the findings of one check over the whole history attributed to
the fault that was active."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from e2e.chaos.attribution import WARM_UP, Span, attribute, spans
from e2e.chaos.checker import check, table
from e2e.chaos.faults import KINDS, plan
from e2e.chaos.history import parse_lines


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    assert plan(30, 5) == plan(30, 5)
    assert plan(30, 5) != plan(30, 6)
    assert [f.index for f in plan(30, 5)] == list(range(1, 31))


def test_kinds_come_in_shuffled_rounds_each_equally_often():
    faults = plan(30, 1)
    assert Counter(f.kind for f in faults) == {k: 5 for k in KINDS}
    assert len({f.kind for f in faults[:len(KINDS)]}) == len(KINDS)  # the first round: no repeat
    three = plan(3, 9, ["kill-master", "freeze-slave", "kill-controller"])
    assert sorted(f.kind for f in three) == ["freeze-slave", "kill-controller", "kill-master"]


def test_hold_times_stay_in_their_kinds_range():
    for f in plan(60, 3):
        _, (lo, hi), second = KINDS[f.kind]
        assert lo <= f.hold <= hi
        assert (second is None and f.hold2 == 0) or (second and second[0] <= f.hold2 <= second[1])


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown fault kinds"):
        plan(3, 1, ["kill-everything"])


def test_spans_run_from_each_injection_to_the_next():
    got = spans([("kill -9 master", 10.0, 4.0), ("freeze slave", 30.0, None)], 0.0, 50.0)
    assert got == [Span(WARM_UP, 0.0, 10.0), Span("kill -9 master", 10.0, 30.0, 4.0),
                   Span("freeze slave", 30.0, 50.0, None)]


def _send(key, t0, t1, status="SEND_OK", queue=0, offset=None):
    ok = status != "FAILED"
    return {"op": "send", "key": key, "digest": "d" + key, "t0": t0 * 1000, "t1": t1 * 1000, "status": status,
            "broker": "b" if ok else None, "queue": queue if ok else None, "offset": offset if ok else None}


def _read(key, t, queue=0, offset=0, session="1"):
    return {"op": "recv", "key": key, "digest": "d" + key, "broker": "b", "queue": queue, "offset": offset,
            "t": t * 1000, "consumer": "c", "session": session}


def test_findings_go_to_the_fault_active_when_they_happened():
    lines = [
        _send("k0", 9.0, 9.1, offset=0), _read("k0", 9.2, offset=0),          # warm-up, clean
        _send("k1", 9.8, 9.9, offset=1), _read("k1", 9.95, offset=1),        # last ack before the kill at 10
        _send("k2", 10.5, 13.5, "FAILED"),                                    # refused during the fault
        _send("k3", 14.0, 14.1, offset=1), _read("k3", 14.2, offset=1, session="2"),  # k1's offset taken over: inconsistent
        _send("k4", 14.5, 14.6, offset=2),                                    # acknowledged, never read...
        _send("k5", 31.0, 31.1, offset=3), _read("k5", 31.2, offset=3),      # ...though a later offset was: lost
        _read("k5", 31.3, offset=3, session="1"),                             # read again, same session: nonmonotonic
    ]
    history = parse_lines([json.dumps(x) for x in lines])
    whole = check(history)
    assert (len(whole.inconsistent), len(whole.lost), len(whole.nonmonotonic)) == (1, 1, 1)
    span_list = spans([("kill -9 master", 10.0, 5.0), ("freeze slave", 30.0, 2.0)], 1.0, 40.0)
    warm, kill, freeze = attribute(whole, history, span_list)

    assert warm.valid and warm.acknowledged == 2 and not warm.windows  # k1 answered at 9.9, before the kill
    assert kill.fault == "kill -9 master" and kill.time_to_ready == 5.0
    assert kill.acknowledged == 2 and kill.failed == 1
    assert [x.position for x in kill.inconsistent] == [("b", 0, 1)]  # when k3 was sent
    assert [m.key for m in kill.lost] == ["k4"]  # when k4 was acknowledged
    # The window begins at k1's acknowledgement (9.9), before the kill: it is the kill's all the same.
    assert [(w.start, w.end) for w in kill.windows] == [(9.9, 14.1)]
    assert [(w.start, w.end) for w in freeze.windows] == [(14.6, 31.1)]  # writes came back during the freeze
    assert freeze.acknowledged == 1 and [x.offset for x in freeze.nonmonotonic] == [3]
    assert sum(r.acknowledged for r in (warm, kill, freeze)) == whole.acknowledged

    rows = table([warm, kill, freeze]).splitlines()
    assert len(rows) == 4 and rows[2].startswith("kill -9 master") and rows[2].endswith("NO")


def test_a_lost_messages_offset_taken_over_goes_with_the_loss():
    lines = [
        _send("k0", 9.0, 9.1, offset=0), _read("k0", 9.2, offset=0),
        _send("gone", 9.8, 9.9, offset=1),                                    # acknowledged before the kill, lost
        _send("taker", 14.0, 14.1, offset=1), _read("taker", 14.2, offset=1),  # its offset, after the failover
    ]
    history = parse_lines([json.dumps(x) for x in lines])
    whole = check(history, loss_allowed=True)
    warm, kill = attribute(whole, history, spans([("kill -9 master", 10.0, 5.0)], 1.0, 40.0))
    assert [m.key for m in warm.unseen] == ["gone"] and [x.keys for x in warm.inconsistent] == [("gone", "taker")]
    assert warm.valid and kill.valid and whole.valid
    assert not check(history).valid
