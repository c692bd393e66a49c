"""The official 4.9.7 Java client's MessageSelector.bySql against FerryMQ: exactly the matching
messages with enablePropertyFilter=true; the consumer's start refused without it."""

from __future__ import annotations

import uuid

import pytest

from testkit.processes import StandaloneProcess

from testkit.java_client import JavaClient

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def filtering_ferrymq(tmp_path_factory, rocketmq_jars):
    server = StandaloneProcess(tmp_path_factory.mktemp("ferrymq-sql") / "store", ["enablePropertyFilter=true"]).start()
    yield server
    server.stop()


def test_java_sql_selector_receives_exactly_the_matching_messages(filtering_ferrymq, java_client):
    ns, topic = filtering_ferrymq.namesrv_addr, f"FerrySql_{uuid.uuid4().hex[:8]}"
    sent = java_client.produce(ns, topic, count=20, modes=["sync", "oneway"], key_prefix="k")
    assert sent.done["ok"], sent
    expected = {f"k-sync-{i}" for i in range(5, 12)}
    args = ["consume", *JavaClient._opts(ns, topic, None, 40000, sql="ferry_seq >= 5 AND ferry_seq < 12 AND "
                                                                         "ferry_mode = 'sync'",
                                         expect_count=len(expected), settle_ms=3000)]
    events = java_client.run(args, 120)
    assert {e["key"] for e in events.of("received")} == expected  # and nothing else within 3 s more


def test_java_sql_consumer_is_refused_when_filtering_is_off(ferrymq, java_client):
    # the client checks the brokers its route names: the topic must exist for the check to run
    topic = f"FerrySqlOff_{uuid.uuid4().hex[:8]}"
    assert java_client.produce(ferrymq.namesrv_addr, topic, count=1, modes=["sync"]).done["ok"]
    args = ["consume", *JavaClient._opts(ferrymq.namesrv_addr, topic, None, 15000, sql="a > 1",
                                         expect_count=1)]
    events = java_client.run(args, 60, check=False)
    errors = " ".join(e.get("error", "") for e in events.of("error"))
    assert "The broker does not support consumer to filter message by SQL92" in errors, events
