"""/healthz, /readyz and /metrics of broker and name server processes, as probes and
Prometheus see them."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import poll_until

pytestmark = pytest.mark.integration


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def processes(tmp_path):
    started: list[FerryProcess] = []

    def start(args: list[str], ready: str, wait: bool = True) -> FerryProcess:
        p = FerryProcess(args, ready, tmp_path / f"{args[0]}-{len(started)}.log")
        started.append(p)
        return p.start() if wait else p

    yield start
    for p in started:
        assert p.stop() == 0, p.log()


def test_broker_is_ready_only_after_a_name_server_took_its_registration(processes, tmp_path):
    ns_port, broker_port, broker_http, ns_http = free_port(), free_port(), free_port(), free_port()
    processes(["broker", "--namesrv", f"127.0.0.1:{ns_port}", "--broker-port", str(broker_port),
                        "--http-port", str(broker_http), "--data-dir", str(tmp_path / "b")], "is ready on")
    assert get(broker_http, "/healthz") == (200, "ok\n")
    status, text = get(broker_http, "/readyz")
    assert status == 503 and "not registered with any name server" in text

    processes(["namesrv", "--port", str(ns_port), "--http-port", str(ns_http)], "name server is ready")
    assert get(ns_http, "/readyz")[0] == 200
    poll_until("broker /readyz answers 200", lambda: get(broker_http, "/readyz")[0] == 200, 20, 0.05)
    ns_metrics = samples(get(ns_http, "/metrics")[1])
    assert ns_metrics[("ferrymq_namesrv_brokers", (("cluster", "DefaultCluster"),))] == 1


def test_broker_metrics_count_traffic_lag_and_groups(processes, tmp_path):
    ns_port, broker_port, http_port = free_port(), free_port(), free_port()
    processes(["standalone", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
               "--http-port", str(http_port), "--data-dir", str(tmp_path / "s")], "standalone is ready")
    ns = f"127.0.0.1:{ns_port}"

    async def traffic():
        async with Producer("p", namesrv_addr=ns) as producer:
            sent = [await producer.send(Message("Metered", b"x" * 100)) for _ in range(10)]
        mq = sent[0].message_queue
        async with PullConsumer("metered-group", namesrv_addr=ns) as consumer:
            result = await consumer.pull(mq, 0, max_nums=32)
            await consumer.commit(mq, 1)
        return mq, sum(1 for s in sent if s.message_queue == mq), len(result.messages)

    mq, in_queue, pulled = asyncio.run(traffic())
    m = samples(get(http_port, "/metrics")[1])
    base = (("broker", "broker-a"), ("cluster", "DefaultCluster"))
    assert m[("ferrymq_broker_messages_in_total", base + (("topic", "Metered"),))] == 10
    assert m[("ferrymq_broker_messages_out_total", base + (("topic", "Metered"),))] == pulled
    assert m[("ferrymq_broker_bytes_in_total", base + (("topic", "Metered"),))] >= 1000
    assert m[("ferrymq_broker_group_lag_messages", base + (("group", "metered-group"), ("topic", "Metered")))] == in_queue - 1
    assert m[("ferrymq_broker_group_consume_enabled", base + (("group", "metered-group"),))] == 1
    assert m[("ferrymq_broker_held_pulls", base)] == 0
    assert m[("ferrymq_broker_store_commitlog_segments", base)] == 1
    assert m[("ferrymq_broker_store_commitlog_bytes", base)] > 1000
    # Every put counted once, by where it was appended (a queue's first put in the writer thread).
    appends = {w: m[("ferrymq_broker_store_appends_total", base + (("where", w),))] for w in ("loop", "thread")}
    assert appends["thread"] >= 1 and appends["loop"] + appends["thread"] >= 10
    assert m[("ferrymq_broker_store_appends_offloaded", base)] == 0
    # A connection counts while it is open, and no longer once closed.
    connections = lambda: samples(get(http_port, "/metrics")[1])[("ferrymq_broker_connections", base)]  # noqa: E731
    before = connections()
    with socket.create_connection(("127.0.0.1", broker_port)):
        poll_until("one more connection counted", lambda: connections() == before + 1, 20, 0.05)
    poll_until("the closed connection uncounted", lambda: connections() == before, 20, 0.05)
    assert ("ferrymq_broker_flush_latency_seconds_count", base) in m
    assert 0 < m[("ferrymq_broker_store_disk_used_ratio", base)] < 1
    assert m[("ferrymq_broker_store_disk_warning_ratio", base)] == 0.9
    assert any(k[0] == "ferrymq_namesrv_topics" for k in m)  # standalone serves both components' metrics


def test_wake_latency_of_held_pulls_is_exported_and_moves(processes, tmp_path):
    ns_port, broker_port, http_port = free_port(), free_port(), free_port()
    processes(["standalone", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
               "--http-port", str(http_port), "--data-dir", str(tmp_path / "s")], "standalone is ready")
    ns = f"127.0.0.1:{ns_port}"
    base = (("broker", "broker-a"), ("cluster", "DefaultCluster"))
    count = ("ferrymq_broker_pull_wake_latency_seconds_count", base)
    total = ("ferrymq_broker_pull_wake_latency_seconds_sum", base)
    metrics = lambda: samples(get(http_port, "/metrics")[1])  # noqa: E731
    before = metrics()
    assert before[count] == 0 and before[total] == 0

    async def woken_pulls(n: int) -> int:
        async with Producer("p", namesrv_addr=ns) as producer, PullConsumer("waker", namesrv_addr=ns) as consumer:
            mq = (await producer.send(Message("Woken", b"first"))).message_queue
            offset = 1
            for i in range(n):
                pull = asyncio.ensure_future(consumer.pull(mq, offset, suspend=20.0))
                # held, then woken by a send to its queue (not by a timer: answered well before 20 s)
                await asyncio.to_thread(poll_until, "the pull held",
                                        lambda: metrics()[("ferrymq_broker_held_pulls", base)] == 1, 20, 0.02)
                await producer.send(Message("Woken", b"wake %d" % i), queue=mq)
                result = await asyncio.wait_for(pull, 10)
                assert [m.body for m in result.messages] == [b"wake %d" % i]
                offset = result.next_begin_offset
        return n

    woken = asyncio.run(woken_pulls(3))
    after = poll_until("three wakes observed", lambda: (m := metrics())[count] == woken and m, 20, 0.05)
    assert 0 < after[total] < 3 * 10  # seconds: each wake took less than the pull's 10 s bound
    buckets = {dict(k[1])["le"]: v for k, v in after.items() if k[0] == "ferrymq_broker_pull_wake_latency_seconds_bucket"}
    assert buckets["+Inf"] == woken and buckets["0.001"] <= woken
