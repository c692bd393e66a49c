"""RocketMQ 5 clients over gRPC beside the 4.x remoting path, FerryMQ against Apache RocketMQ 5.

Not a test. Run: .venv/bin/python bench/grpc_bench.py [--quick] [--brokers ferrymq,apache]
[--messages N] [--threads 1,16] [--modes permissive,disabled]

Brokers (``--brokers``, default both), one fresh broker per broker and mode, ASYNC_FLUSH, 127.0.0.1:

* ``ferrymq``  ``ferrymq standalone`` with ``grpcTlsMode=<mode>`` (gRPC on a port of its own);
* ``apache``   Apache's proxy in local mode (``ProxyStartup -pm local``: the broker in the proxy's
               JVM, gRPC and remoting served by one process), the newest ``rocketmq-proxy`` Maven
               Central serves here (testkit.java_client.PROXY_VERSION, 5.2.0: 5.3.x is not found),
               its own broker of the same version, under the harness's 4.9.7 name server; a 1 GiB
               G1 JVM with full JIT and 1 GiB commit-log files, as bench/broker_bench.py runs
               Apache. Mode ``permissive``: the proxy's JVM has ``tls.server.mode=permissive``
               (plaintext and TLS on the gRPC port, a self-signed certificate), ``disabled``:
               plaintext only.

Each broker first gets ``--broker-warmup`` unmeasured messages (5.x sends from 16 threads, a
SimpleConsumer draining them, 4.x sync16 sends) so a JVM broker has compiled its hot paths.
Then per broker and mode, a topic of 8 queues per protocol, 1 KiB bodies, each scenario after
its own unmeasured warm-up (``--warmup``):

* ``5x-send-T``     the official Java 5 client (rocketmq-client-java 5.2.0), T threads doing sync
                    ``send()`` on one Producer, plaintext;
* ``5x-send-T-tls`` the same over TLS (the client's ``enableSsl``, which trusts any certificate;
                    permissive mode only, T the largest of ``--threads``);
* ``5x-simple``     a SimpleConsumer draining what 5x-send put there: receive 32, ackAsync each;
* ``4x-syncT``      the official Java 4.9.7 client (``ferrymq.compat.BenchLoad``), T threads of
                    sync sends on one DefaultMQProducer, to the broker's remoting port;
* ``4x-pull``       the 4.9.7 DefaultMQPullConsumer draining its topic.

The Java clients run with full JIT (bench/broker_bench.py's load-generator options).

Reported: messages/s and the broker process's CPU (utime+stime from /proc) per message handled
(the scenario's warm-up included: its CPU is counted too); per mode the FerryMQ/Apache throughput
ratio of each 5.x scenario; per broker and mode the 5.x send's cost against a 4.x send (CPU per
message of 5x-send-16 / 4x-sync16 and 5x-send-1 / 4x-sync1; issue 33 wants <= 1.5); the load
average before and after and the CPU other processes used meanwhile (figures taken on a busy
machine are not final). A full run (both brokers, both modes, threads 1,16, not --quick) writes
bench/results/grpc-<date>-<time>.json; ``--json PATH`` writes any run there too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from broker_bench import (APACHE_BROKER_CONF, APACHE_BROKER_JVM, LOADGEN_JVM, QUEUES, OutsideLoad,  # noqa: E402
                          machine_info, outside_load_line, proc_cpu_seconds, wait_for_route)
from ferrymq.client.admin import AdminClient  # noqa: E402
from testkit.grpc_clients import run_grpc_java  # noqa: E402
from testkit.java_client import java_client_command  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import StandaloneProcess  # noqa: E402

RESULTS_DIR = REPO / "bench" / "results"
BROKERS = ("ferrymq", "apache")
MODES = ("permissive", "disabled")
FULL = {"messages": 20_000, "warmup": 2000, "broker_warmup": 10_000}
QUICK = {"messages": 1500, "warmup": 200, "broker_warmup": 500}
# issue 33: a 5.x send may cost the broker at most 1.5x a 4.x send
SEND_COST_TARGET = 1.5


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The brokers under test


class FerryTarget:
    name = "FerryMQ"

    def __init__(self, workdir: Path, mode: str) -> None:
        self.port = free_port()
        self.server = StandaloneProcess(workdir / "store", settings=[f"grpcListenPort={self.port}",
                                                                     f"grpcTlsMode={mode}"])

    def start(self) -> None:
        self.server.start()

    @property
    def pid(self) -> int:
        return self.server.proc.pid

    @property
    def namesrv_addr(self) -> str:
        return self.server.namesrv_addr

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def version(self) -> str:
        return "FerryMQ standalone"

    async def create_topic(self, topic: str) -> None:
        async with AdminClient(namesrv_addr=self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queues=QUEUES, write_queues=QUEUES)

    def stop(self) -> None:
        self.server.stop()


class ApacheTarget:
    """Apache's proxy in local mode: one JVM, the broker and the proxy (testkit.apache)."""

    name = "Apache"

    def __init__(self, workdir: Path, mode: str) -> None:
        from testkit.apache import PROXY_VERSION, ApacheRocketMQ

        self.mq = ApacheRocketMQ(proxy_version=PROXY_VERSION, proxy_mode="local", proxy_tls=mode == "permissive",
                                 broker_jvm_opts=APACHE_BROKER_JVM, broker_conf=dict(APACHE_BROKER_CONF),
                                 workdir=workdir / "apache", startup_timeout=180)

    def start(self) -> None:
        self.mq.start()

    @property
    def pid(self) -> int | None:
        return self.mq.broker_pid

    @property
    def namesrv_addr(self) -> str:
        return self.mq.namesrv_addr

    @property
    def grpc_endpoint(self) -> str:
        return self.mq.grpc_endpoint

    @property
    def version(self) -> str:
        return f"Apache RocketMQ proxy {self.mq.proxy_version} local mode, broker {self.mq.broker_version}"

    async def create_topic(self, topic: str) -> None:
        from testkit.java_client import run_mqadmin

        await asyncio.to_thread(run_mqadmin, self.namesrv_addr, "updateTopic", "-c", self.mq.cluster_name,
                                "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))

    def stop(self) -> None:
        self.mq.stop()


TARGETS = {"ferrymq": FerryTarget, "apache": ApacheTarget}


def apache_available() -> str | None:
    """Why Apache's proxy cannot run here (its jars cannot be had), or None."""
    from testkit.apache import PROXY_VERSION
    from testkit.java_client import CompatUnavailable, ensure_compat_classes, ensure_rocketmq_jars

    try:
        ensure_rocketmq_jars(PROXY_VERSION)
        ensure_compat_classes()  # BenchLoad and mqadmin: the 4.9.7 client
        return None
    except CompatUnavailable as e:
        return e.reason


# ---------------------------------------------------------------------------------------------
# Load generators


def java4(namesrv: str, topic: str, scenario: str, messages: int, size: int, warmup: int) -> dict:
    cmd = java_client_command(["--namesrv", namesrv, "--topic", topic, "--scenarios", scenario, "--messages",
                               str(messages), "--seconds", "120", "--warmup", str(warmup), "--size", str(size)],
                              main="ferrymq.compat.BenchLoad", jvm_args=LOADGEN_JVM)
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "result":
                if event.get("errors"):
                    raise RuntimeError(f"BenchLoad {scenario}: {event['errors']} errors, first {event.get('firstError')}")
                return event
    raise RuntimeError(f"BenchLoad {scenario} gave no result:\n{proc.stderr[-2000:]}")


def java5(mode: str, **options) -> dict:
    return run_grpc_java(mode, jvm_args=LOADGEN_JVM, **options).of("done")[0]


def measure(pid: int, run) -> tuple[dict, float]:
    before = proc_cpu_seconds(pid)
    result = run()
    return result, proc_cpu_seconds(pid) - before


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


def warm_up(target, args) -> None:
    """Not measured: 5.x sends from 16 threads, a SimpleConsumer draining them, 4.x sync16 sends."""
    n = args.broker_warmup
    if n <= 0:
        return
    log(f"  broker warm-up: {n} messages (5.x send16 + simple, 4.x sync16)")
    topic = unique("WarmG")
    asyncio.run(prepare(target, topic))
    java5("bench-produce", endpoints=target.grpc_endpoint, topic=topic, count=n, threads=16, size=args.size,
          warmup=0, timeout=600)
    java5("bench-simple", endpoints=target.grpc_endpoint, topic=topic, group=unique("WarmGroup"), expect=n,
          batch=32, awaitMs=2000, timeoutMs=300_000, timeout=360)
    topic4 = unique("Warm4")
    asyncio.run(prepare(target, topic4))
    java4(target.namesrv_addr, topic4, "sync16", n, args.size, 0)


async def prepare(target, topic: str) -> None:
    await target.create_topic(topic)
    await wait_for_route(target.namesrv_addr, topic)


def run_broker(broker: str, mode: str, args) -> list[dict]:
    """A fresh broker of kind ``broker`` in ``mode``: warmed up, measured, stopped."""
    with tempfile.TemporaryDirectory(prefix=f"grpc-bench-{broker}-") as tmp:
        target = TARGETS[broker](Path(tmp), mode)
        t0 = time.monotonic()
        target.start()
        try:
            log(f"{target.name} [{mode}] ({target.version}) up in {time.monotonic() - t0:.1f}s")
            warm_up(target, args)
            return run_scenarios(target, mode, args)
        finally:
            target.stop()


def run_scenarios(target, mode: str, args) -> list[dict]:
    """Every scenario on a started broker: one row each."""
    rows = []
    pid = target.pid
    endpoint = target.grpc_endpoint

    def row(name: str, messages: int, seconds: float, cpu: float, handled: int | None = None) -> None:
        """``handled``: messages the broker worked on while ``cpu`` was counted (warm-up included)."""
        per_msg = cpu / max(handled or messages, 1) * 1e6
        rows.append({"broker": target.name, "mode": mode, "scenario": name, "messages": messages,
                     "seconds": round(seconds, 3), "msgs_per_s": messages / seconds,
                     "broker_cpu_s": round(cpu, 3), "broker_cpu_us_per_msg": per_msg})
        log(f"  [{target.name} {mode}] {name:16s} {messages / seconds:9.0f} msg/s  "
            f"broker CPU {per_msg:6.0f} us/msg")

    sent_total = 0
    topic5 = unique("Bench5")
    asyncio.run(prepare(target, topic5))
    variants = [(t, False) for t in args.threads]
    if mode == "permissive":
        variants.append((max(args.threads), True))
    for threads, tls in variants:
        done, cpu = measure(pid, lambda: java5(
            "bench-produce", endpoints=endpoint, topic=topic5, count=args.messages, threads=threads,
            size=args.size, warmup=args.warmup, ssl=str(tls).lower(), timeout=600))
        sent_total += done["sent"] + done["warmup"]
        row(f"5x-send-{threads}" + ("-tls" if tls else ""), done["sent"], done["seconds"], cpu,
            done["sent"] + done["warmup"])
    done, cpu = measure(pid, lambda: java5(
        "bench-simple", endpoints=endpoint, topic=topic5, group=unique("BenchG"), expect=sent_total,
        batch=32, awaitMs=2000, timeoutMs=600_000, timeout=660))
    row("5x-simple", done["received"], done["seconds"], cpu)

    topic4 = unique("Bench4")
    asyncio.run(prepare(target, topic4))
    for threads in args.threads:
        result, cpu = measure(pid, lambda: java4(target.namesrv_addr, topic4, f"sync{threads}",
                                                 args.messages, args.size, args.warmup))
        row(f"4x-sync{threads}", result["messages"], result["elapsedS"], cpu, result["messages"] + args.warmup)
    result, cpu = measure(pid, lambda: java4(target.namesrv_addr, topic4, "pull", args.messages, args.size,
                                             args.warmup))
    row("4x-pull", result["messages"], result["elapsedS"], cpu, result["messages"] + args.warmup)
    return rows


# ---------------------------------------------------------------------------------------------
# The report


def index(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    return {(r["broker"], r["mode"], r["scenario"]): r for r in rows}


def summary(rows: list[dict], args) -> dict:
    """FerryMQ/Apache throughput ratios per 5.x scenario, and each broker's 5.x-send cost ratios."""
    by = index(rows)
    ratios, costs = [], []
    for mode in args.modes:
        for scenario in sorted({s for (_, m, s) in by if m == mode and s.startswith("5x-")}, key=scenario_key):
            f, a = by.get(("FerryMQ", mode, scenario)), by.get(("Apache", mode, scenario))
            if f and a:
                ratios.append({"mode": mode, "scenario": scenario,
                               "throughput_ratio": f["msgs_per_s"] / a["msgs_per_s"],
                               "cpu_ratio": f["broker_cpu_us_per_msg"] / a["broker_cpu_us_per_msg"]})
        for broker in ("FerryMQ", "Apache"):
            for t in args.threads:
                five, four = by.get((broker, mode, f"5x-send-{t}")), by.get((broker, mode, f"4x-sync{t}"))
                if five and four:
                    costs.append({"broker": broker, "mode": mode, "pair": f"5x-send-{t} / 4x-sync{t}",
                                  "cost_ratio": five["broker_cpu_us_per_msg"] / four["broker_cpu_us_per_msg"]})
    return {"ratios": ratios, "send_costs": costs}


def scenario_key(name: str) -> tuple:
    order = {"5x-send": 0, "5x-simple": 1, "4x-sync": 2, "4x-pull": 3}
    base = next(k for k in order if name.startswith(k))
    digits = "".join(c for c in name[len(base):] if c.isdigit())
    return order[base], int(digits or 0), name.endswith("-tls")


def print_report(info: dict, rows: list[dict], errors: dict, args, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    by = index(rows)
    p(f"\ngRPC (RocketMQ 5 Java client 5.2.0) beside 4.x remoting (Java 4.9.7 client): {args.messages} messages of "
      f"{args.size} B per scenario after {args.warmup} unmeasured, broker warm-up {args.broker_warmup}")
    p(f"machine: {info.get('nproc')} CPUs {info.get('cpu')}, {info.get('java')}, FerryMQ {info.get('ferrymq_commit')}")
    for name, version in info.get("versions", {}).items():
        p(f"{name}: {version}")
    header = ("mode", "scenario", "FerryMQ msg/s", "CPU us/msg", "Apache msg/s", "CPU us/msg", "F/A msg/s", "F/A CPU")
    lines = [header]
    for mode in args.modes:
        for scenario in sorted({s for (_, m, s) in by if m == mode}, key=scenario_key):
            f, a = by.get(("FerryMQ", mode, scenario)), by.get(("Apache", mode, scenario))
            cell = lambda r, k, fmt: format(r[k], fmt) if r else "-"  # noqa: E731
            ratio = lambda k: f"{f[k] / a[k]:.2f}x" if f and a else "-"  # noqa: E731
            lines.append((mode, scenario, cell(f, "msgs_per_s", ",.0f"), cell(f, "broker_cpu_us_per_msg", ",.0f"),
                          cell(a, "msgs_per_s", ",.0f"), cell(a, "broker_cpu_us_per_msg", ",.0f"),
                          ratio("msgs_per_s"), ratio("broker_cpu_us_per_msg")))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        p("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            p("  ".join("-" * w for w in widths))
    s = summary(rows, args)
    if s["send_costs"]:
        p(f"\n5.x send cost against a 4.x send (broker CPU per message; issue 33: <= {SEND_COST_TARGET}x):")
        for c in s["send_costs"]:
            verdict = "met" if c["cost_ratio"] <= SEND_COST_TARGET else "NOT met"
            p(f"  {c['broker']:8s} {c['mode']:10s} {c['pair']:22s} {c['cost_ratio']:5.2f}x  {verdict}")
    if s["ratios"]:
        worst = min(s["ratios"], key=lambda r: r["throughput_ratio"])
        p(f"\nFerryMQ/Apache 5.x throughput: minimum {worst['throughput_ratio']:.2f}x ({worst['mode']} "
          f"{worst['scenario']}; issue 33: >= 1.0x)")
    for key, why in errors.items():
        p(f"FAILED {key}: {why}")
    lb, la = info.get("loadavg_before"), info.get("loadavg_after")
    p(f"\nload average before: {lb}   after: {la}")
    p(outside_load_line(info))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run: {QUICK['messages']} messages per scenario (not written to bench/results)")
    p.add_argument("--brokers", default=",".join(BROKERS), help="ferrymq, apache or both (default both)")
    p.add_argument("--messages", type=int, default=None, help=f"per scenario (default {FULL['messages']})")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=None, help=f"unmeasured per scenario (default {FULL['warmup']})")
    p.add_argument("--broker-warmup", type=int, default=None,
                   help=f"unmeasured messages per broker before its scenarios (default {FULL['broker_warmup']})")
    p.add_argument("--threads", default="1,16", help="sender threads per send scenario (default 1,16)")
    p.add_argument("--modes", default=",".join(MODES), help="grpcTlsMode / the proxy's tls.server.mode (default both)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args()
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.brokers = [b.strip().lower() for b in args.brokers.split(",") if b.strip()]
    unknown = [b for b in args.brokers if b not in BROKERS] + [m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"unknown broker or mode: {', '.join(unknown)}")

    info = machine_info()
    load = OutsideLoad(info)
    log(f"grpc bench: {args.messages} messages of {args.size} B per scenario; {os.cpu_count()} CPUs, "
        f"load average {info['loadavg_before']}")
    brokers = list(args.brokers)
    errors: dict[str, str] = {}
    if "apache" in brokers and (why := apache_available()):
        log(f"Apache RocketMQ's proxy jars unavailable ({why}): FerryMQ only")
        errors["Apache"] = f"jars unavailable: {why}"
        brokers.remove("apache")
    if "apache" in brokers:
        from testkit.apache import PROXY_VERSION

        info["versions"] = {"Apache": f"rocketmq-proxy {PROXY_VERSION} in local mode, its broker {PROXY_VERSION} "
                                      f"in the same JVM ({' '.join(APACHE_BROKER_JVM)}), name server 4.9.7"}
    rows: list[dict] = []
    for mode in args.modes:
        for broker in brokers:
            try:
                rows += run_broker(broker, mode, args)
            except Exception as e:  # noqa: BLE001 - one broker's failure is reported, the others still run
                log(f"{broker} [{mode}]: failed: {e!r}")
                errors[f"{broker} {mode}"] = repr(e)[:2000]
    load.finish()
    info["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_report(info, rows, errors, args)
    doc = {"machine": info, "args": vars(args), "rows": rows, **summary(rows, args), "errors": errors,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"results written to {args.json}")
    full = (not args.quick and set(args.brokers) == set(BROKERS) and set(args.modes) == set(MODES)
            and args.threads == [1, 16] and args.messages >= FULL["messages"] and not errors)
    if full:
        path = RESULTS_DIR / f"grpc-{datetime.datetime.now().strftime('%Y-%m-%d-%H%M')}.json"
        path.write_text(json.dumps(doc, indent=2))
        print(f"results written to {path}")
    elif not args.json:
        print("not a full run (--quick, one broker or mode, other threads or messages, or a failure): "
              "not written to bench/results (--json PATH keeps it)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
