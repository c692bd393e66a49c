"""Message trace from the official clients (``enableMsgTrace``), the same test against
``ferrymq standalone`` and Apache's 5.3.1 broker, both with ``traceTopicEnable=true``.

The 4.9.7 client (``ferrymq.compat.ProduceConsume --trace true``) and the 5.3.1 remoting client
(``ferrymq.compat53.Trace``) each send one message and consume it; their trace records must then
be in the trace topic: a publish record and consume records for the message, with its topic,
producer and consumer groups, keys and success, read through ``ferrymq admin message trace``
and through mqadmin's ``queryMsgTraceById``. Against Apache the same assertions prove the
decoder reads Apache-stored records as it reads FerryMQ's. A client's ``customizedTraceTopic``
lands in that topic (auto-created from TBW102 on both brokers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.apache import ApacheRocketMQ
from testkit.grpc_clients import unique_names
from testkit.java_client import ROCKETMQ5_VERSION, run_java_client, run_mqadmin
from testkit.processes import StandaloneProcess
from testkit.wait import poll_until

pytestmark = pytest.mark.compat

REPO = Path(__file__).resolve().parents[2]
TRACE_MAIN_53 = "ferrymq.compat53.Trace"
SETTINGS = {"traceTopicEnable": "true"}


@pytest.fixture(scope="module", params=["ferrymq", "apache-5.3.1"])
def broker(request, rocketmq5_jars, tmp_path_factory):
    """The peer under test, with the trace topic enabled."""
    if request.param == "ferrymq":
        server = StandaloneProcess(tmp_path_factory.mktemp("ferrymq-trace") / "store",
                                   settings=[f"{k}={v}" for k, v in SETTINGS.items()]).start()
        try:
            yield server
        finally:
            assert server.stop() == 0, server.log()
    else:
        with ApacheRocketMQ(broker_version=ROCKETMQ5_VERSION, broker_conf=SETTINGS) as mq:
            yield mq


def trace_cli(namesrv: str, msg_id: str, *args: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "message", "trace", msg_id,
                          "-n", namesrv, "--json", *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    assert "warning" not in out.stderr, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def wait_for_trace(namesrv: str, msg_id: str, *args: str) -> list[dict]:
    """The client sends its records asynchronously (and the consume records after the publish
    one): wait until a publish and a consume-after record are stored."""
    return poll_until(f"publish and consume trace records of {msg_id}",
                      lambda: (lambda ev: ev if {"Pub", "SubBefore", "SubAfter"} <= {e["type"] for e in ev} else None)(
                          trace_cli(namesrv, msg_id, *args)),
                      timeout=60, interval=0.5)


def check_events(events: list[dict], *, msg_id: str, topic: str, group: str, key: str, tags: str) -> None:
    by_type = {e["type"]: e for e in events}
    pub, before, after = by_type["Pub"], by_type["SubBefore"], by_type["SubAfter"]
    assert all(e["msgId"] == msg_id for e in events)
    assert (pub["topic"], pub["group"], pub["keys"], pub["tags"], pub["success"]) == (topic, f"{group}_P", key, tags, True)
    assert pub["msgType"] == "Normal" and pub["offsetMsgId"] and pub["storeHost"]
    assert pub["clientHost"] and pub["costMs"] >= 0 and pub["timestamp"] > 0
    assert (before["group"], before["keys"], before["topic"], before["retryTimes"]) == (group, key, topic, 0)
    assert (after["group"], after["keys"], after["topic"], after["success"]) == (group, key, topic, True)
    assert after["requestId"] == before["requestId"] and after["costMs"] >= 0
    assert [e["typeName"] for e in events][0] == "publish"


def check_mqadmin(namesrv: str, msg_id: str, group: str, *args: str) -> None:
    """mqadmin's queryMsgTraceById prints a Pub row with the producer group and a Sub row."""
    out = run_mqadmin(namesrv, "queryMsgTraceById", "-i", msg_id, *args)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert ["Pub", f"{group}_P"] == [r[:2] for r in rows if r[0] == "Pub"][0], out
    assert any(r[0] == "Sub" and r[-1] == "success" for r in rows), out


def test_java_4_client_trace_records(broker):
    topic, group = unique_names("Trace4")
    key = f"{group}-key"
    events = run_java_client(["produce-consume", "--namesrv", broker.namesrv_addr, "--topic", topic,
                              "--group", group, "--count", "1", "--modes", "sync", "--tag", "TagT",
                              "--key-prefix", key, "--trace", "true", "--timeout-ms", "40000"], timeout=120)
    (sent,) = events.of("sent")
    trace = wait_for_trace(broker.namesrv_addr, sent["msgId"])
    check_events(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagT")
    check_mqadmin(broker.namesrv_addr, sent["msgId"], group)


def test_java_5_remoting_client_trace_records(broker):
    topic, group = unique_names("Trace53")
    events = run_java_client(["--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
                              "--key", f"{group}-key", "--timeout-ms", "40000"],
                             timeout=120, main=TRACE_MAIN_53, version=ROCKETMQ5_VERSION)
    (sent,) = events.of("sent")
    trace = wait_for_trace(broker.namesrv_addr, sent["msgId"])
    check_events(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagTrace")
    check_mqadmin(broker.namesrv_addr, sent["msgId"], group)


def test_customized_trace_topic(broker):
    topic, group = unique_names("TraceCustom")
    trace_topic = f"{topic}_TRACE"
    events = run_java_client(["produce-consume", "--namesrv", broker.namesrv_addr, "--topic", topic,
                              "--group", group, "--count", "1", "--modes", "sync", "--tag", "TagC",
                              "--key-prefix", f"{group}-key", "--trace-topic", trace_topic,
                              "--timeout-ms", "40000"], timeout=120)
    (sent,) = events.of("sent")
    trace = wait_for_trace(broker.namesrv_addr, sent["msgId"], "--trace-topic", trace_topic)
    check_events(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagC")
    assert trace_cli(broker.namesrv_addr, sent["msgId"]) == [], "records of a custom trace topic in the default one"
