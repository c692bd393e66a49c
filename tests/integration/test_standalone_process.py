"""``ferrymq standalone`` as users run it: a separate process, restarted, fed garbage,
driven by the CLI, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.ports import free_port
from testkit.processes import REPO, StandaloneProcess

pytestmark = pytest.mark.integration


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferrymq.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_topics_messages_and_offsets_survive_a_restart(standalone_process, tmp_path):
    server = standalone_process(settings=["mappedFileSizeCommitLog=65536"])
    bodies = [os.urandom(100 + i * 37) for i in range(200)]  # ~27 KiB per queue: several 64 KiB segments in all

    async def produce_and_commit():
        async with AdminClient(namesrv_addr=server.namesrv_addr) as admin:
            await admin.create_topic("Durable", read_queues=3, write_queues=3)
        acks = []
        async with Producer("p", namesrv_addr=server.namesrv_addr) as producer:
            for i, body in enumerate(bodies):
                m = Message("Durable", body, properties={"i": str(i)})
                m.keys = [f"k{i}"]
                r = await producer.send(m)
                acks.append((r.message_queue, r.queue_offset))
        async with PullConsumer("g-durable", namesrv_addr=server.namesrv_addr) as consumer:
            await consumer.commit(MessageQueue("Durable", "broker-a", 1), 17)
        return acks

    acks = asyncio.run(produce_and_commit())
    assert server.stop() == 0, server.log()
    segments = sorted(os.listdir(server.data_dir / "commitlog"))
    assert len(segments) >= 2 and segments[1] == f"{65536:020d}"

    again = StandaloneProcess(server.data_dir, ["mappedFileSizeCommitLog=65536"]).start()
    try:
        async def read_back():
            async with AdminClient(namesrv_addr=again.namesrv_addr) as admin:
                route = await admin.topic_route("Durable")
            async with PullConsumer("g-durable", namesrv_addr=again.namesrv_addr) as consumer:
                committed = await consumer.committed(MessageQueue("Durable", "broker-a", 1))
                got = {}
                for mq in {mq for mq, _ in acks}:
                    offset = 0
                    while True:
                        result = await consumer.pull(mq, offset, max_nums=32)
                        if not result.messages:
                            break
                        for m in result.messages:
                            got[(mq, m.queue_offset)] = m
                        offset = result.next_begin_offset
                # New sends continue right after the old ones.
                async with Producer("p2", namesrv_addr=again.namesrv_addr) as producer:
                    more = await producer.send(Message("Durable", b"after restart"), queue=acks[0][0])
            return route, committed, got, more

        route, committed, got, more = asyncio.run(read_back())
    finally:
        assert again.stop() == 0, again.log()
    assert route.queue_datas[0].write_queue_nums == 3
    assert committed == 17
    assert len(got) == len(bodies)
    for i, (mq, offset) in enumerate(acks):
        m = got[(mq, offset)]
        assert m.body == bodies[i] and m.properties["i"] == str(i) and m.keys == [f"k{i}"]
    assert more.queue_offset == sum(1 for mq, _ in acks if mq == acks[0][0])


def test_sigterm_shuts_down_cleanly_and_leaves_no_abort_marker(standalone_process):
    server = standalone_process()
    assert server.stop() == 0
    assert "stopped cleanly" in server.log()
    assert not (server.data_dir / "abort").exists()


def test_garbage_on_one_connection_does_not_disturb_another_client(standalone_process):
    server = standalone_process()

    async def scenario():
        client = RemotingClient()
        try:
            before = await client.invoke(server.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            for garbage in (struct.pack(">i", 3) + b"abc", struct.pack(">ii", 100, 0x00FFFFFF) + b"x" * 96,
                            struct.pack(">ii", 30, 20) + b"{not json" + b" " * 17, b"GET / HTTP/1.1\r\n\r\n",
                            struct.pack(">i", 0x7FFFFFFF)):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.broker_port)
                writer.write(garbage)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""  # the broker closed that socket
                writer.close()
            after = await client.invoke(server.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            return before, after
        finally:
            await client.close()

    before, after = asyncio.run(scenario())
    assert before.code == after.code == ResponseCode.SUCCESS
    assert server.proc.poll() is None


def test_cli_produce_consume_and_topic_admin(standalone_process):
    server = standalone_process()
    ns = server.namesrv_addr
    created = cli("admin", "topic", "create", "CliTopic", "-n", ns, "-q", "2", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["brokers"] == [server.broker_addr]

    produced = cli("produce", "-n", ns, "-t", "CliTopic", "--count", "5", "--tags", "T1", "--keys", "key-{i}", "--json")
    assert produced.returncode == 0, produced.stderr
    acks = [json.loads(line) for line in produced.stdout.splitlines()]
    assert len(acks) == 5 and all(a["status"] == "SEND_OK" for a in acks)

    consumed = cli("consume", "-n", ns, "-t", "CliTopic", "--from", "earliest", "--count", "5", "--json", "--timeout", "20")
    assert consumed.returncode == 0, consumed.stderr
    got = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(g["keys"] for g in got) == [f"key-{i}" for i in range(5)]
    assert {g["msgId"] for g in got} == {a["msgId"] for a in acks}

    listed = cli("admin", "topic", "list", "-n", ns)
    assert "CliTopic" in listed.stdout.split()
    route = cli("admin", "topic", "route", "-n", ns, "CliTopic")
    assert "broker-a" in route.stdout and server.broker_addr in route.stdout


def test_cli_errors_are_one_clear_line_and_non_zero():
    bad_args = cli("produce")
    assert bad_args.returncode == 2 and bad_args.stderr.strip().count("\n") == 0 and "--topic" in bad_args.stderr
    unreachable = cli("admin", "topic", "list", "-n", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("error: ") and unreachable.stderr.strip().count("\n") == 0
    bad_conf = cli("standalone", "--set", "noSuchKey=1", "--namesrv-port", str(free_port()), "--broker-port", str(free_port()))
    assert bad_conf.returncode == 1 and "unknown configuration key 'noSuchKey'" in bad_conf.stderr


def test_standalone_demo_produces_and_consumes_and_keeps_serving(tmp_path):
    """What `make run` does: start, run the demo, keep serving until SIGTERM."""
    ns_port, broker_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ferrymq.cli.main", "standalone", "--demo", "--data-dir",
                             str(tmp_path / "data"), "--namesrv-port", str(ns_port), "--broker-port", str(broker_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    lines = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Serving until Ctrl-C" in line or not line:
                break
        out = "".join(lines)
        assert "produced: 'hello from FerryMQ" in out, out
        assert "consumed: 'hello from FerryMQ" in out, out
        with socket.create_connection(("127.0.0.1", broker_port), timeout=5):
            pass  # still serving
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, "".join(lines) + rest


def test_the_broker_serves_clients_on_uvloop_when_asked(standalone_process, monkeypatch):
    """FERRYMQ_EVENT_LOOP=uvloop: the same broker on uvloop's transports (a wrong assumption about
    asyncio's transport classes once made every connection fail there)."""
    monkeypatch.setenv("FERRYMQ_EVENT_LOOP", "uvloop")
    server = standalone_process()
    bodies = [f"on uvloop {i}".encode() for i in range(30)]

    async def round_trip():
        async with AdminClient(namesrv_addr=server.namesrv_addr) as admin:
            await admin.create_topic("OnUvloop", read_queues=1, write_queues=1)
        async with Producer("p-uvloop", namesrv_addr=server.namesrv_addr) as producer:
            for body in bodies:
                await producer.send(Message("OnUvloop", body))
        async with PullConsumer("g-uvloop", namesrv_addr=server.namesrv_addr) as consumer:
            result = await consumer.pull(MessageQueue("OnUvloop", "broker-a", 0), 0, max_nums=32)
        return [m.body for m in result.messages]

    assert asyncio.run(round_trip()) == bodies
    assert server.stop() == 0
    assert "Traceback" not in server.log() and " ERROR " not in server.log(), server.log()
