"""End-to-end consume benchmark: push consumers on FerryMQ against Apache RocketMQ 4.9.7.

Not a test. Run: .venv/bin/python bench/e2e_latency.py [--quick] [--rate 500] [--seconds 10]
                 [--backlog 20000] [--only ferrymq|apache] [--consumers python,java] [--markdown]

For each broker (FerryMQ ``standalone`` subprocess; Apache RocketMQ 4.9.7 name server + broker
from the compat harness) and each push consumer (FerryMQ's ``PushConsumer`` in this process;
the official ``DefaultMQPushConsumer`` in its own JVM, tests/compat ``PushConsumerRun``), on
topics with 8 queues and 1 KiB bodies:

* ``latency``: a producer (FerryMQ's Python client, in its own process) sends at a steady
  ``--rate`` for ``--seconds`` after a warm-up; latency per message = the time the listener
  saw it minus the broker's store timestamp (same host clock, ms resolution), so it is the
  store -> long-poll wake-up -> pull -> decode -> listener path; p50, p99, max.
* ``catch-up``: ``--backlog`` messages are stored first (batch sends); a new group then starts
  from the first offset; throughput = messages / time from the first to the last message at
  the listener (client start-up excluded).

The listeners do nothing but record. Each scenario runs ``--rounds`` times (fresh topic and
group each time); medians are reported. Ratios compare FerryMQ with Apache for the same consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ferrymq.client.producer import Producer  # noqa: E402
from ferrymq.client.push_config import ConsumeFromWhere  # noqa: E402
from ferrymq.client.push_consumer import PushConsumer  # noqa: E402
from ferrymq.common.message import Message  # noqa: E402
from testkit.wait import wait_until  # noqa: E402
# The brokers and helpers are the throughput bench's (same set-up, one definition).
from broker_bench import (ApacheBroker, FerryBroker, OutsideLoad, log, machine_info, outside_load_line,  # noqa: E402
                          percentile, wait_for_route)

QUEUES = 8
BODY = 1024
CONSUMER_JVM = ("-Xms128m", "-Xmx512m", "-XX:TieredStopAtLevel=4")


async def produce_main(args: argparse.Namespace) -> None:
    body = b"x" * BODY
    async with Producer("e2e-bench-producer", namesrv_addr=args.namesrv) as producer:
        if args.batch:
            for start in range(0, args.count, 32):
                batch = [Message(args.topic, body) for _ in range(min(32, args.count - start))]
                await producer.send_batch(batch)
        else:
            t0 = time.monotonic()
            for i in range(args.count):
                delay = t0 + i / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await producer.send(Message(args.topic, body))
            elapsed = time.monotonic() - t0
            print(json.dumps({"sent": args.count, "elapsed": elapsed}), flush=True)


async def run_producer(namesrv: str, topic: str, count: int, *, rate: float = 0, batch: bool = False) -> dict:
    cmd = [sys.executable, __file__, "_produce", "--namesrv", namesrv, "--topic", topic, "--count", str(count),
           "--rate", str(rate)] + (["--batch"] if batch else [])
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"producer failed ({proc.returncode})")
    lines = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    return lines[-1] if lines else {}


# ---------------------------------------------------------------------------------------------
# Consumers


@dataclass
class Arrivals:
    samples: list[tuple[float, int]] = field(default_factory=list)  # (arrival ms, store ms)
    count: int = 0
    first_ms: float = 0.0  # wall clock ms when the first message reached the listener
    last_ms: float = 0.0  # ... and the latest one


class PythonConsumer:
    name = "python"

    def __init__(self, namesrv: str, group: str, topic: str) -> None:
        self.arrivals = Arrivals()
        self.consumer = PushConsumer(group, namesrv_addr=namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        self.consumer.subscribe(topic).register_listener(self._listen)

    def _listen(self, msgs, context) -> None:
        now = time.time() * 1000
        a = self.arrivals
        for m in msgs:
            a.samples.append((now, m.store_timestamp))
        if not a.count:
            a.first_ms = now
        a.count += len(msgs)
        a.last_ms = now

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.shutdown()


class JavaConsumer:
    name = "java"

    def __init__(self, namesrv: str, group: str, topic: str, expect: int = 0) -> None:
        self.arrivals = Arrivals()
        self.args = ["--namesrv", namesrv, "--topic", topic, "--group", group, "--instance", group, "--run-ms", "900000"]
        if expect:  # throughput run: no line per message (the pipe would be the bottleneck)
            self.args += ["--quiet", "true", "--expect", str(expect)]
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = asyncio.Event()
        self.reader: asyncio.Task | None = None

    async def start(self) -> None:
        from testkit.java_client import java_client_command

        cmd = java_client_command(self.args, main="ferrymq.compat.PushConsumerRun", jvm_args=CONSUMER_JVM)
        self.proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        self.reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self.ready.wait(), 60)

    async def _read(self) -> None:
        a = self.arrivals
        async for line in self.proc.stdout:
            if not line.startswith(b"{"):
                continue
            e = json.loads(line)
            if e["event"] == "ready":
                self.ready.set()
            elif e["event"] == "received":
                a.samples.append((e["receivedAt"], e["storeTimestamp"]))
                a.count += 1
            elif e["event"] == "count":
                a.count = e["n"]
            elif e["event"] == "first":
                a.first_ms = e["at"]
            elif e["event"] == "reached":
                a.last_ms = e["at"]
                a.count = max(a.count, e["n"])

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except asyncio.TimeoutError:
                self.proc.kill()
        if self.reader:
            await self.reader


CONSUMERS = {"python": PythonConsumer, "java": JavaConsumer}


async def wait_count(arrivals: Arrivals, n: int, timeout: float) -> None:
    await wait_until(lambda: arrivals.count >= n, timeout, f"{n} messages arrived", interval=0.05,
                     diagnostics=lambda: f"only {arrivals.count} of {n} arrived")


# ---------------------------------------------------------------------------------------------
# Scenarios


async def latency(broker, kind: str, rate: float, seconds: float, warmup: float, run_id: str) -> dict:
    topic, group = f"E2ELat_{kind}_{run_id}", f"e2e-lat-{kind}-{run_id}"
    await broker.create_topic(topic)
    await wait_for_route(broker.namesrv_addr, topic)
    consumer = CONSUMERS[kind](broker.namesrv_addr, group, topic)
    await consumer.start()
    try:
        warm = max(1, int(rate * warmup))
        await run_producer(broker.namesrv_addr, topic, warm, rate=rate)
        await wait_count(consumer.arrivals, warm, 60)
        consumer.arrivals.samples.clear()
        n = int(rate * seconds)
        sent = await run_producer(broker.namesrv_addr, topic, n, rate=rate)
        await wait_count(consumer.arrivals, warm + n, 60)
    finally:
        await consumer.stop()
    lat = sorted(arrival - store for arrival, store in consumer.arrivals.samples)
    return {"messages": len(lat), "sendRate": n / sent["elapsed"] if sent.get("elapsed") else None,
            "p50Ms": percentile(lat, 0.5), "p99Ms": percentile(lat, 0.99), "maxMs": lat[-1] if lat else None}


async def catch_up(broker, kind: str, backlog: int, run_id: str) -> dict:
    topic, group = f"E2ECatch_{kind}_{run_id}", f"e2e-catch-{kind}-{run_id}"
    await broker.create_topic(topic)
    await wait_for_route(broker.namesrv_addr, topic)
    await run_producer(broker.namesrv_addr, topic, backlog, batch=True)
    consumer = (JavaConsumer(broker.namesrv_addr, group, topic, expect=backlog) if kind == "java"
                else PythonConsumer(broker.namesrv_addr, group, topic))
    await consumer.start()
    try:
        await wait_count(consumer.arrivals, backlog, 300)
        while not consumer.arrivals.last_ms:  # the "reached" line follows the last count
            await asyncio.sleep(0.01)
    finally:
        await consumer.stop()
    # From the first to the last message at the listener: the drain itself, not client start-up.
    elapsed = (consumer.arrivals.last_ms - consumer.arrivals.first_ms) / 1000
    return {"messages": backlog, "elapsedS": elapsed, "msgsPerSec": (backlog - 1) / elapsed if elapsed > 0 else None}


def _median_of(rounds: list[dict]) -> dict:
    """Per field, the median over the rounds (the rounds themselves are kept in the JSON)."""
    out = {}
    for key in rounds[0]:
        values = sorted(r[key] for r in rounds if r.get(key) is not None)
        out[key] = values[len(values) // 2] if values else None
    return out


def markdown(results: dict, args: argparse.Namespace) -> str:
    m = results["machine"]
    lines = [f"## Push consumer end to end: latency and catch-up, FerryMQ vs Apache RocketMQ ({m['date'][:10]})", "",
             f"`bench/e2e_latency.py --rate {args.rate:g} --seconds {args.seconds:g} --backlog {args.backlog} "
             f"--rounds {args.rounds}`: medians of {args.rounds} rounds; "
             f"{m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, commit {m['ferrymq_commit']}. 8 queues, 1 KiB bodies, "
             "ASYNC_FLUSH, broker, producer (FerryMQ Python client, own process) and consumer on one host. "
             "Latency = listener clock minus the broker's store timestamp (ms resolution).", "",
             "| broker | consumer | msgs | p50 ms | p99 ms | max ms | catch-up msg/s |", "|---|---|---:|---:|---:|---:|---:|"]
    rows = results["runs"]
    for r in rows:
        lat, cu = r.get("latency", {}), r.get("catchUp", {})
        lines.append(f"| {r['broker']} | {r['consumer']} | {lat.get('messages', '-')} | {_f(lat.get('p50Ms'))} | "
                     f"{_f(lat.get('p99Ms'))} | {_f(lat.get('maxMs'))} | {_f(cu.get('msgsPerSec'), 0)} |")
    lines.append("")
    by = {(r["broker"], r["consumer"]): r for r in rows}
    for kind in CONSUMERS:
        f, a = by.get(("FerryMQ", kind)), by.get(("Apache", kind))
        if f and a and "latency" in f and "latency" in a:
            lines.append(f"- {kind} consumer, FerryMQ / Apache: p50 {_ratio(f['latency']['p50Ms'], a['latency']['p50Ms'])}, "
                         f"p99 {_ratio(f['latency']['p99Ms'], a['latency']['p99Ms'])}, catch-up throughput "
                         f"{_ratio(f['catchUp']['msgsPerSec'], a['catchUp']['msgsPerSec'])}")
    return "\n".join(lines) + "\n"


def _f(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ratio(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


async def main_async(args: argparse.Namespace) -> dict:
    kinds = [k.strip() for k in args.consumers.split(",") if k.strip()]
    brokers = [FerryBroker, ApacheBroker]
    if args.only:
        brokers = [b for b in brokers if b.name.lower() == args.only]
    results = {"machine": machine_info(), "runs": []}
    load = OutsideLoad(results["machine"])  # what else the machine did meanwhile (every report says)
    workdir = Path(tempfile.mkdtemp(prefix="ferrymq-e2e-bench-"))
    try:
        await _run_all(args, brokers, kinds, results, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        load.finish()
    return results


async def _run_all(args: argparse.Namespace, brokers: list, kinds: list[str], results: dict, workdir: Path) -> None:
    run_id = str(int(time.time()))
    for cls in brokers:
        broker = cls(workdir)
        log(f"starting {broker.name}")
        try:
            broker.start()
        except Exception as e:  # noqa: BLE001 - e.g. Maven Central unreachable for Apache
            log(f"{broker.name} unavailable: {e}")
            continue
        try:
            for kind in kinds:
                lat_rounds, catch_rounds = [], []
                for r in range(args.rounds):
                    tag = f"{run_id}_{r}"
                    log(f"{broker.name} / {kind} round {r + 1}: latency at {args.rate:g} msg/s for {args.seconds:g} s")
                    lat_rounds.append(await latency(broker, kind, args.rate, args.seconds, args.warmup, tag))
                    log(f"  {lat_rounds[-1]}")
                    log(f"{broker.name} / {kind} round {r + 1}: catch-up of {args.backlog} messages")
                    catch_rounds.append(await catch_up(broker, kind, args.backlog, tag))
                    log(f"  {catch_rounds[-1]}")
                results["runs"].append({"broker": broker.name, "consumer": kind, "latency": _median_of(lat_rounds),
                                        "catchUp": _median_of(catch_rounds), "rounds": {"latency": lat_rounds,
                                                                                        "catchUp": catch_rounds}})
        finally:
            broker.stop()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_produce":
        p = argparse.ArgumentParser()
        p.add_argument("_produce")
        p.add_argument("--namesrv", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--count", type=int, required=True)
        p.add_argument("--rate", type=float, default=0)
        p.add_argument("--batch", action="store_true")
        asyncio.run(produce_main(p.parse_args()))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="rate 300, 4 s, backlog 5000")
    p.add_argument("--rate", type=float, default=500.0, help="messages per second for the latency run")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--backlog", type=int, default=50000)
    p.add_argument("--rounds", type=int, default=3, help="repeat each scenario; medians are reported")
    p.add_argument("--only", choices=["ferrymq", "apache"])
    p.add_argument("--consumers", default="python,java")
    p.add_argument("--markdown", action="store_true", help="print a RESULTS.md section at the end")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    if args.quick:
        args.rate, args.seconds, args.backlog, args.rounds = 300.0, 4.0, 5000, 1
    results = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(outside_load_line(results["machine"]))
    if args.markdown:
        print(markdown(results, args))
    return 0 if results["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
