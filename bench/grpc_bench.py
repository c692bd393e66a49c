"""RocketMQ 5 (gRPC) clients against FerryMQ, beside the 4.x remoting path on the same broker.

Not a test. Run: .venv/bin/python bench/grpc_bench.py [--messages N] [--threads 1,16] [--modes permissive,disabled]

For each ``grpcTlsMode`` in ``--modes`` a fresh ``ferrymq standalone`` (ASYNC_FLUSH, on
127.0.0.1) gets a topic of 8 queues per scenario, then, 1 KiB bodies, each after its own
unmeasured warm-up:

* ``5x-send-T``     the official Java 5 client (rocketmq-client-java 5.2.0), T threads doing sync
                    ``send()`` on one Producer, plaintext (through the TLS switch in permissive mode);
* ``5x-send-T-tls`` the same over TLS (permissive mode only);
* ``5x-simple``     a SimpleConsumer draining what 5x-send put there: receive 32, ackAsync each;
* ``4x-syncT``      the official Java 4.9.7 client (``ferrymq.compat.BenchLoad``), T threads of
                    sync sends on one DefaultMQProducer;
* ``4x-pull``       the 4.9.7 DefaultMQPullConsumer draining its topic.

Reported: messages/s and the broker's CPU (utime+stime from /proc) per message; the machine's
load average before and after (figures taken on a busy machine are not final).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ferrymq.client.admin import AdminClient  # noqa: E402
from testkit.grpc_clients import run_grpc_java  # noqa: E402
from testkit.java_client import java_client_command  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import StandaloneProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def create_topic(namesrv: str, topic: str) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, read_queues=8, write_queues=8)


def measure(pid: int, run) -> tuple[dict, float]:
    before = cpu_seconds(pid)
    result = run()
    return result, cpu_seconds(pid) - before


def java4(namesrv: str, topic: str, scenario: str, messages: int, size: int) -> dict:
    cmd = java_client_command(["--namesrv", namesrv, "--topic", topic, "--scenarios", scenario, "--messages",
                               str(messages), "--seconds", "60", "--warmup", "2000", "--size", str(size)],
                              main="ferrymq.compat.BenchLoad")
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "result":
                return event
    raise RuntimeError(f"BenchLoad {scenario} gave no result:\n{proc.stderr[-2000:]}")


def run_mode(mode: str, args) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-grpc-bench-") as tmp:
        port = free_port()
        server = StandaloneProcess(Path(tmp) / "store", settings=[f"grpcListenPort={port}", f"grpcTlsMode={mode}"])
        server.start()
        pid = server.proc.pid
        endpoint = f"127.0.0.1:{port}"
        try:
            def row(name: str, messages: int, seconds: float, cpu: float, handled: int | None = None) -> None:
                """``handled``: messages the broker worked on while ``cpu`` was counted (warm-up included)."""
                per_msg = cpu / max(handled or messages, 1) * 1e6
                rows.append({"mode": mode, "scenario": name, "messages": messages, "msgs_per_s": messages / seconds,
                             "broker_cpu_us_per_msg": per_msg})
                log(f"  [{mode}] {name:16s} {messages / seconds:9.0f} msg/s  broker CPU {per_msg:6.0f} us/msg")

            sent_total = 0
            topic5 = f"Bench5_{uuid.uuid4().hex[:6]}"
            asyncio.run(create_topic(server.namesrv_addr, topic5))
            variants = [(t, False) for t in args.threads]
            if mode == "permissive":
                variants.append((max(args.threads), True))
            for threads, tls in variants:
                events, cpu = measure(pid, lambda: run_grpc_java(
                    "bench-produce", endpoints=endpoint, topic=topic5, count=args.messages, threads=threads,
                    size=args.size, warmup=args.warmup, ssl=str(tls).lower(), timeout=600))
                done = events.of("done")[0]
                sent_total += done["sent"] + done["warmup"]
                row(f"5x-send-{threads}" + ("-tls" if tls else ""), done["sent"], done["seconds"], cpu,
                    done["sent"] + done["warmup"])
            group = f"BenchG_{uuid.uuid4().hex[:6]}"
            events, cpu = measure(pid, lambda: run_grpc_java(
                "bench-simple", endpoints=endpoint, topic=topic5, group=group, expect=sent_total, batch=32,
                awaitMs=2000, timeoutMs=600_000, timeout=660))
            done = events.of("done")[0]
            row("5x-simple", done["received"], done["seconds"], cpu)

            topic4 = f"Bench4_{uuid.uuid4().hex[:6]}"
            asyncio.run(create_topic(server.namesrv_addr, topic4))
            for threads in args.threads:
                result, cpu = measure(pid, lambda: java4(server.namesrv_addr, topic4, f"sync{threads}",
                                                         args.messages, args.size))
                row(f"4x-sync{threads}", result["messages"], result["elapsedS"], cpu, result["messages"] + 2000)
            result, cpu = measure(pid, lambda: java4(server.namesrv_addr, topic4, "pull", args.messages, args.size))
            row("4x-pull", result["messages"], result["elapsedS"], cpu)
        finally:
            server.stop()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--threads", default="1,16", help="sender threads per send scenario (default 1,16)")
    p.add_argument("--modes", default="permissive,disabled", help="grpcTlsMode values to run (default both)")
    args = p.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    load_before = os.getloadavg()
    log(f"grpc bench: {args.messages} messages of {args.size} B per scenario; {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    rows = []
    for mode in args.modes.split(","):
        rows += run_mode(mode, args)
    load_after = os.getloadavg()
    log(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(json.dumps({"rows": rows, "cpus": os.cpu_count(), "load_before": load_before, "load_after": load_after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
