"""The reference: the compat harness driven against the REAL Apache RocketMQ 4.9.7.

If these fail, the harness (or the machine) is broken, not FerryMQ. The same Java programs and
assertions are what tests/compat/test_java_client_against_ferrymq.py points at FerryMQ.
"""

from __future__ import annotations

import uuid

import pytest

from .checks import COUNT, MODES, check_produce_consume
from testkit.apache import ApacheRocketMQ
from testkit.java_client import JavaClient, JavaEvents, run_mqadmin

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def produced(apache_rocketmq: ApacheRocketMQ, java_client: JavaClient) -> tuple[str, JavaEvents]:
    """One ProduceConsume run: 20 sync + 20 async + 20 oneway, then a push consumer."""
    topic = f"FerryCompatRef_{uuid.uuid4().hex[:8]}"
    events = java_client.produce_consume(
        apache_rocketmq.namesrv_addr, topic, count=COUNT, modes=MODES, tag="TagA",
        key_prefix="ref", timeout_ms=40000,
    )
    return topic, events


def test_java_produce_then_push_consume_all_send_modes(produced):
    check_produce_consume(*produced)


def test_mqadmin_cluster_list_and_topic_route(apache_rocketmq: ApacheRocketMQ, produced):
    topic, _ = produced
    ns = apache_rocketmq.namesrv_addr

    clusters = run_mqadmin(ns, "clusterList")
    row = [ln for ln in clusters.splitlines() if apache_rocketmq.broker_name in ln]
    assert row, clusters
    assert apache_rocketmq.cluster_name in row[0] and apache_rocketmq.broker_addr in row[0]

    route = run_mqadmin(ns, "topicRoute", "-t", topic)
    assert f'"brokerName":"{apache_rocketmq.broker_name}"' in route, route
    assert f'"{apache_rocketmq.broker_addr}"' in route, route
    # auto-created by the producer: its defaultTopicQueueNums (4) read and write queues
    assert '"readQueueNums":4' in route and '"writeQueueNums":4' in route, route
