"""The official mqadmin (rocketmq-tools 4.9.7) against ``ferrymq standalone``: the commands
RocketMQ users already know, with their output checked."""

from __future__ import annotations

import re
import uuid

import pytest

from testkit.java_client import run_mqadmin

pytestmark = pytest.mark.compat


def test_update_topic_then_topic_list_and_route(ferrymq):
    topic = f"AdminTopic_{uuid.uuid4().hex[:6]}"
    out = run_mqadmin(ferrymq.namesrv_addr, "updateTopic", "-b", ferrymq.broker_addr, "-t", topic, "-r", "3", "-w", "5")
    assert "create topic to " + ferrymq.broker_addr + " success" in out, out
    assert topic in run_mqadmin(ferrymq.namesrv_addr, "topicList").split()
    route = run_mqadmin(ferrymq.namesrv_addr, "topicRoute", "-t", topic)
    assert '"readQueueNums":3' in route and '"writeQueueNums":5' in route, route
    assert f'"{ferrymq.broker_addr}"' in route


def test_update_topic_for_a_whole_cluster(ferrymq):
    topic = f"AdminClusterTopic_{uuid.uuid4().hex[:6]}"
    out = run_mqadmin(ferrymq.namesrv_addr, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    assert f"create topic to {ferrymq.broker_addr} success" in out, out
    assert '"writeQueueNums":2' in run_mqadmin(ferrymq.namesrv_addr, "topicRoute", "-t", topic)


def test_cluster_list_shows_the_broker_with_its_version(ferrymq):
    out = run_mqadmin(ferrymq.namesrv_addr, "clusterList")
    rows = [line for line in out.splitlines() if "broker-a" in line]
    assert rows, out
    assert "DefaultCluster" in rows[0] and ferrymq.broker_addr in rows[0] and "V4_9_7" in rows[0], out


def test_broker_status_prints_runtime_info(ferrymq):
    out = run_mqadmin(ferrymq.namesrv_addr, "brokerStatus", "-b", ferrymq.broker_addr)
    table = dict(re.findall(r"^(\w+)\s*:\s*(.*)$", out, re.M))
    assert table.get("brokerVersionDesc") == "V4_9_7", out
    assert int(table["commitLogMaxOffset"]) >= 0 and "putTps" in table


def test_update_sub_group_and_consumer_progress(ferrymq, java_client):
    topic = f"AdminProgress_{uuid.uuid4().hex[:6]}"
    group = f"AdminGroup_{uuid.uuid4().hex[:6]}"
    out = run_mqadmin(ferrymq.namesrv_addr, "updateSubGroup", "-b", ferrymq.broker_addr, "-g", group, "-r", "3")
    assert f"create subscription group to {ferrymq.broker_addr} success" in out, out

    # A group that consumed part of a topic: Java produces 10, the push consumer reads them,
    # then 5 more arrive that nobody reads.
    java_client.produce(ferrymq.namesrv_addr, topic, count=10, modes=("sync",), key_prefix="p")
    # settle: the Java client records a message's offset only after its listener returned, and
    # persists at shutdown; keep it running briefly so the last listeners finish first.
    java_client.consume(ferrymq.namesrv_addr, topic, group=group, expect_count=10, settle_ms=1500)
    java_client.produce(ferrymq.namesrv_addr, topic, count=5, modes=("sync",), key_prefix="q")

    progress = run_mqadmin(ferrymq.namesrv_addr, "consumerProgress", "-g", group)
    rows = [line.split() for line in progress.splitlines() if line.startswith(topic)]
    assert rows, progress
    broker_offsets = sum(int(r[3]) for r in rows)
    consumer_offsets = sum(int(r[4]) for r in rows)
    assert broker_offsets == 15, progress
    assert consumer_offsets == 10, progress
    assert "Diff Total: 5" in progress, progress
