"""Allocation strategies: the expected shares below were produced by RocketMQ 4.9.7's own
classes (tests/compat AllocationOracle.java; test_allocation_oracle.py re-checks random cases
against the live jar). Java and Python members of one group must agree exactly."""

from __future__ import annotations

import itertools

import pytest

from ferrymq.client.allocation import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_machine_room,
    allocate_consistent_hash,
    java_mq_string,
    md5_hash,
)
from ferrymq.common.protocol import MessageQueue

CIDS3 = ["10.0.0.1@a", "10.0.0.1@b", "10.0.0.2@c"]
MQ8 = [MessageQueue("T", "broker-a", i) for i in range(8)]
MQ_2B = sorted([MessageQueue("T", "broker-a", i) for i in range(4)] + [MessageQueue("T", "broker-b", i) for i in range(4)])


def ids(mqs):
    return [(mq.broker_name, mq.queue_id) for mq in mqs]


def a(*qs):
    return [("broker-a", q) for q in qs]


def b(*qs):
    return [("broker-b", q) for q in qs]


ORACLE = {
    # (strategy, mqs, cids): {cid: share}
    ("avg", "mq8", 3): {"10.0.0.1@a": a(0, 1, 2), "10.0.0.1@b": a(3, 4, 5), "10.0.0.2@c": a(6, 7)},
    ("avg", "mq2", 3): {"10.0.0.1@a": a(0), "10.0.0.1@b": a(1), "10.0.0.2@c": []},
    ("avg", "mq2b", 2): {"10.0.0.1@a": a(0, 1, 2, 3), "10.0.0.1@b": b(0, 1, 2, 3)},
    ("avg", "mq8", 1): {"10.0.0.1@a": a(*range(8))},
    ("circle", "mq8", 3): {"10.0.0.1@a": a(0, 3, 6), "10.0.0.1@b": a(1, 4, 7), "10.0.0.2@c": a(2, 5)},
    ("circle", "mq2", 3): {"10.0.0.1@a": a(0), "10.0.0.1@b": a(1), "10.0.0.2@c": []},
    ("circle", "mq2b", 2): {"10.0.0.1@a": a(0, 2) + b(0, 2), "10.0.0.1@b": a(1, 3) + b(1, 3)},
    ("hash", "mq8", 3): {"10.0.0.1@a": [], "10.0.0.1@b": a(0, 3, 5), "10.0.0.2@c": a(1, 2, 4, 6, 7)},
    ("hash", "mq2", 3): {"10.0.0.1@a": [], "10.0.0.1@b": a(0), "10.0.0.2@c": a(1)},
    ("hash", "mq2b", 2): {"10.0.0.1@a": a(1) + b(1), "10.0.0.1@b": a(0, 2, 3) + b(0, 2, 3)},
    ("hash", "mq8", 1): {"10.0.0.1@a": a(*range(8))},
}
FUNCS = {"avg": allocate_averagely, "circle": allocate_averagely_by_circle, "hash": allocate_consistent_hash}
QUEUES = {"mq8": MQ8, "mq2": MQ8[:2], "mq2b": MQ_2B}


@pytest.mark.parametrize("case", sorted(ORACLE), ids=lambda c: "-".join(map(str, c)))
def test_shares_match_rocketmq(case):
    strategy, queues, n = case
    cids = CIDS3[:n]
    for cid, expected in ORACLE[case].items():
        assert ids(FUNCS[strategy]("g", cid, QUEUES[queues], cids)) == expected, cid


@pytest.mark.parametrize("strategy", ["avg", "circle", "hash"])
@pytest.mark.parametrize("queues,members", list(itertools.product([1, 3, 8, 16, 17], [1, 2, 3, 5, 9])))
def test_every_queue_has_exactly_one_owner(strategy, queues, members):
    mqs = [MessageQueue("T", "broker-a", i) for i in range(queues)]
    cids = sorted(f"10.0.0.{i}@{i}" for i in range(members))
    shares = [FUNCS[strategy]("g", cid, mqs, cids) for cid in cids]
    owned = [mq for share in shares for mq in share]
    assert sorted(owned) == mqs
    if strategy != "hash":  # the block strategies are balanced to within one queue
        assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_not_a_member_gets_nothing_and_bad_input_is_refused():
    assert allocate_averagely("g", "stranger", MQ8, CIDS3) == []
    assert allocate_averagely_by_circle("g", "stranger", MQ8, CIDS3) == []
    assert allocate_consistent_hash("g", "stranger", MQ8, CIDS3) == []
    with pytest.raises(ValueError):
        allocate_averagely("g", "", MQ8, CIDS3)
    with pytest.raises(ValueError):
        allocate_averagely("g", "x", [], ["x"])
    with pytest.raises(ValueError):
        allocate_averagely_by_circle("g", "x", MQ8, [])


def test_machine_room_takes_only_queues_of_its_rooms():
    mqs = ([MessageQueue("T", "room1@broker-a", i) for i in range(3)]
           + [MessageQueue("T", "room2@broker-b", i) for i in range(3)] + [MessageQueue("T", "plain", 0)])
    both = {cid: [(mq.broker_name, mq.queue_id) for mq in allocate_by_machine_room("g", cid, mqs, CIDS3, {"room1", "room2"})]
            for cid in CIDS3}
    assert both == {"10.0.0.1@a": [("room1@broker-a", 0), ("room1@broker-a", 1)],
                    "10.0.0.1@b": [("room1@broker-a", 2), ("room2@broker-b", 0)],
                    "10.0.0.2@c": [("room2@broker-b", 1), ("room2@broker-b", 2)]}
    room2 = [ids(allocate_by_machine_room("g", cid, mqs, CIDS3, {"room2"})) for cid in CIDS3]
    assert room2 == [[("room2@broker-b", 0)], [("room2@broker-b", 1)], [("room2@broker-b", 2)]]


def test_strategy_objects_and_config_strategy():
    assert AllocateAveragely().allocate("g", CIDS3[0], MQ8, CIDS3) == allocate_averagely("g", CIDS3[0], MQ8, CIDS3)
    assert AllocateAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateConsistentHash(virtual_nodes=10).allocate("g", CIDS3[2], MQ8, CIDS3) == [MQ8[i] for i in (1, 2, 4, 6, 7)]
    assert AllocateByConfig((MQ8[5],)).allocate("g", "anyone", MQ8, ["x"]) == [MQ8[5]]
    assert AllocateByMachineRoom(frozenset({"r"})).allocate("g", "x", [MessageQueue("T", "r@b", 0)], ["x"]) == [
        MessageQueue("T", "r@b", 0)]


def test_consistent_hash_keys_are_javas():
    assert java_mq_string(MessageQueue("T", "b", 3)) == "MessageQueue [topic=T, brokerName=b, queueId=3]"
    assert 0 <= md5_hash("x") < 2**32
    assert md5_hash("abc") == 0x90015098  # MD5("abc") = 900150983cd24fb0...
