"""Message trace from the official clients (``enableMsgTrace``), the same test against
``ferrymq standalone`` and Apache's 5.3.1 broker, both with ``traceTopicEnable=true``.

The 4.9.7 client (``ferrymq.compat.ProduceConsume --trace true --hold true``) and the 5.3.1
remoting client (``ferrymq.compat53.Trace``) each send one message and consume it, then stay up
(their trace records go out in the background and a shutdown loses what is unsent) until the
records are stored: a publish record and consume records for the message, with its topic,
producer and consumer groups, keys and success, read through ``ferrymq admin message trace``
and through mqadmin's ``queryMsgTraceById``. The 5.3.1 client's consume records arrive only now
and then on either broker, so for it only the publish record is required. Against Apache the
same assertions prove the decoder reads Apache-stored records as it reads FerryMQ's. A client's
``customizedTraceTopic`` (made beforehand) receives its records instead of the default topic.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from testkit.apache import ApacheRocketMQ
from testkit.grpc_clients import unique_names
from testkit.java_client import ROCKETMQ5_VERSION, java_client_command, run_mqadmin
from testkit.processes import StandaloneProcess
from testkit.wait import poll_until

pytestmark = pytest.mark.compat

REPO = Path(__file__).resolve().parents[2]
TRACE_MAIN_53 = "ferrymq.compat53.Trace"
SETTINGS = {"traceTopicEnable": "true"}
CLIENT_4_TYPES = {"Pub", "SubBefore", "SubAfter"}


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


def wait_for_trace(namesrv: str, msg_id: str, *args: str, types: set[str] = CLIENT_4_TYPES) -> list[dict]:
    """The clients send their records asynchronously (the consume ones after the publish one):
    wait until a record of every type in ``types`` is stored."""
    def found() -> list[dict] | None:
        events = trace_cli(namesrv, msg_id, *args)
        return events if types <= {e["type"] for e in events} else None
    return poll_until(f"{sorted(types)} trace records of {msg_id}", found, timeout=60, interval=0.5,
                      diagnostics=lambda: f"found: {trace_cli(namesrv, msg_id, *args)}")


def check_publish(events: list[dict], *, msg_id: str, topic: str, group: str, key: str, tags: str) -> None:
    assert all(e["msgId"] == msg_id for e in events), events
    assert events[0]["type"] == "Pub" and events[0]["typeName"] == "publish", events
    (pub,) = [e for e in events if e["type"] == "Pub"]
    assert (pub["topic"], pub["group"], pub["keys"], pub["tags"], pub["success"]) == (topic, f"{group}_P", key, tags, True)
    assert pub["msgType"] == "Normal" and pub["offsetMsgId"] and pub["storeHost"]
    assert pub["clientHost"] and pub["costMs"] >= 0 and pub["timestamp"] > 0


def check_consume(events: list[dict], *, topic: str, group: str, key: str) -> None:
    (before,) = [e for e in events if e["type"] == "SubBefore"]
    (after,) = [e for e in events if e["type"] == "SubAfter"]
    assert (before["group"], before["keys"], before["topic"], before["retryTimes"]) == (group, key, topic, 0)
    # the region is the MSG_REGION the broker stamped on the message (regionId, DefaultRegion)
    assert before["regionId"] == "DefaultRegion", before
    assert (after["group"], after["keys"], after["topic"], after["success"]) == (group, key, topic, True)
    assert after["requestId"] == before["requestId"] and after["costMs"] >= 0 and after["clientHost"]


def check_mqadmin(namesrv: str, msg_id: str, group: str, *, consumed: bool | None = True) -> None:
    """mqadmin's queryMsgTraceById prints a Pub row with the producer group (and a Sub row)."""
    out = run_mqadmin(namesrv, "queryMsgTraceById", "-i", msg_id)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert [r[:2] for r in rows if r[0] == "Pub"] == [["Pub", f"{group}_P"]], out
    assert rows[[r[0] for r in rows].index("Pub")][-1] == "success", out
    if consumed is not None:
        assert any(r[0] == "Sub" and r[-1] == "success" for r in rows) == consumed, out


def test_java_4_client_trace_records(broker):
    topic, group = unique_names("Trace4")
    with held_client(["produce-consume", "--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
                      "--count", "1", "--modes", "sync", "--tag", "TagT", "--key-prefix", f"{group}-key",
                      "--trace", "true", "--hold", "true", "--timeout-ms", "90000"]) as events:
        (sent,) = [e for e in events if e["event"] == "sent"]
        trace = wait_for_trace(broker.namesrv_addr, sent["msgId"])
    check_publish(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagT")
    check_consume(trace, topic=topic, group=group, key=sent["key"])
    check_mqadmin(broker.namesrv_addr, sent["msgId"], group)


@contextmanager
def held_client(args: list[str], **program) -> Iterator[list[dict]]:
    """A Java program of ours up to its "consumed" event; its consumer stays up (sending its
    trace records in the background: a shutdown would lose what is unsent) until the block
    ends and stdin is closed. ``program``: ``main=`` and ``version=`` of java_client_command."""
    cmd = java_client_command(args, **program)
    with tempfile.TemporaryFile() as err, subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                            stderr=err, text=True) as proc:
        events = []
        try:
            for line in proc.stdout:  # the program ends by its own --timeout-ms at worst
                if line.startswith("{"):
                    events.append(json.loads(line))
                    if events[-1]["event"] in ("consumed", "error"):
                        break
            assert events and events[-1] == {"event": "consumed", "ok": True}, events
            yield events
        finally:
            proc.stdin.close()
            rest = proc.stdout.read()
            assert proc.wait(timeout=60) == 0, (events, rest, err.seek(0) or err.read()[-3000:])


def test_java_5_remoting_client_trace_records(broker):
    topic, group = unique_names("Trace53")
    with held_client(["--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
                      "--key", f"{group}-key", "--timeout-ms", "90000"],
                     main=TRACE_MAIN_53, version=ROCKETMQ5_VERSION) as events:
        (sent,) = [e for e in events if e["event"] == "sent"]
        trace = wait_for_trace(broker.namesrv_addr, sent["msgId"], types={"Pub"})
    check_publish(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagTrace")
    # The 5.3.1 remoting client's consumer sends its consume records now and then only, with
    # Apache 5.3.1 as with FerryMQ (docs/trace.md#what-lands-in-the-topic): checked when there
    if {"SubBefore", "SubAfter"} & {e["type"] for e in trace}:
        check_consume(trace, topic=topic, group=group, key=sent["key"])
    check_mqadmin(broker.namesrv_addr, sent["msgId"], group, consumed=None)


def test_customized_trace_topic(broker):
    topic, group = unique_names("TraceCustom")
    trace_topic = f"{topic}_TRACE"
    # made up front, as an operator would: the clients' first trace sends to a topic that
    # TBW102 has yet to create race with its creation (on Apache as on FerryMQ)
    made = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "topic", "create", trace_topic,
                           "-n", broker.namesrv_addr, "-q", "1"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert made.returncode == 0, made.stderr
    with held_client(["produce-consume", "--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
                      "--count", "1", "--modes", "sync", "--tag", "TagC", "--key-prefix", f"{group}-key",
                      "--trace-topic", trace_topic, "--hold", "true", "--timeout-ms", "90000"]) as events:
        (sent,) = [e for e in events if e["event"] == "sent"]
        trace = wait_for_trace(broker.namesrv_addr, sent["msgId"], "--trace-topic", trace_topic)
    check_publish(trace, msg_id=sent["msgId"], topic=topic, group=group, key=sent["key"], tags="TagC")
    check_consume(trace, topic=topic, group=group, key=sent["key"])
    assert trace_cli(broker.namesrv_addr, sent["msgId"]) == [], "records of a custom trace topic in the default one"
