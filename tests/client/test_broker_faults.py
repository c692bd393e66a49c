"""Producers avoid a broker that failed recently and come back to it later."""

from ferrymq.client import broker_faults
from ferrymq.client.broker_faults import BrokerFaults
from ferrymq.client.producer import Producer
from ferrymq.common.protocol import BrokerData, QueueData, TopicRouteData


def route(*brokers: str) -> TopicRouteData:
    return TopicRouteData(queue_datas=[QueueData(b, 2, 2) for b in brokers],
                          broker_datas=[BrokerData("c", b, {0: f"{b}:1"}) for b in brokers])


def test_failed_broker_is_avoided_then_tried_again(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(broker_faults.time, "monotonic", lambda: now[0])
    faults = BrokerFaults()
    faults.record("a", 0.0, failed=True)
    assert not faults.available("a") and faults.available("b")
    now[0] += broker_faults.FAILURE_AVOID_SECONDS + 0.1
    assert faults.available("a")


def test_slow_answers_are_avoided_in_proportion_and_fast_ones_clear_the_mark():
    faults = BrokerFaults()
    faults.record("a", 0.7, failed=False)
    assert not faults.available("a")
    faults.record("a", 0.01, failed=False)
    assert faults.available("a")


def test_queue_selection_round_robins_and_skips_avoided_brokers():
    producer = Producer("p", namesrv_addr="127.0.0.1:1")
    r = route("a", "b", "c")
    picks = [producer._select_queue(r, "T", None) for _ in range(6)]
    assert len(set(picks)) == 6  # round robin over all six queues
    producer.faults.record("b", 0.0, failed=True)
    assert all(producer._select_queue(r, "T", None).broker_name != "b" for _ in range(12))
    assert all(producer._select_queue(r, "T", "a").broker_name == "c" for _ in range(12))
    producer.faults.record("a", 0.0, failed=True)
    producer.faults.record("c", 0.0, failed=True)
    # Every broker avoided: still pick something instead of failing.
    assert producer._select_queue(r, "T", None).broker_name in {"a", "b", "c"}
