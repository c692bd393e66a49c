"""Broker throughput and latency: FerryMQ standalone against Apache RocketMQ 4.9.7.

Not a test. Run: .venv/bin/python bench/broker_bench.py [--quick] [--messages N] [--only ferrymq|apache]

For each broker (FerryMQ ``standalone`` as a subprocess, Apache RocketMQ 4.9.7 name server +
broker from the compat harness; both ASYNC_FLUSH unless --flush SYNC_FLUSH, 1 GiB commit-log files, on 127.0.0.1), a
topic with 8 queues per load generator is created (FerryMQ's admin client / the official
mqadmin), then each scenario is measured by two load generators in turn:

* ``python``: FerryMQ's own asyncio client (``Producer``, ``PullConsumer``) in this process;
* ``java``: ``ferrymq.compat.BenchLoad``, the official RocketMQ 4.9.7 Java client
  (``DefaultMQProducer``, ``DefaultMQPullConsumer``) in its own JVM.

Each broker first gets ``--broker-warmup`` unmeasured messages (sent and pulled, on a topic of
its own) so the JVM has compiled its hot paths. Scenarios, 1 KiB bodies, each after an
unmeasured warm-up of the same shape (``--warmup``), each bounded by ``--messages`` and
``--seconds``:

* ``sync1``   sync sends, 1 in flight (one sender);
* ``sync64``  sync sends, 64 in flight (64 concurrent senders on one producer);
* ``batch32`` batch sends of 32 messages, 1 batch in flight;
* ``pull``    drain the topic (everything the sends put there) from offset 0, 32 per pull,
  one puller per queue (8 pulls in flight).

Latency is per request (a send, a batch, a pull). Broker CPU is the broker process's
utime+stime over the scenario (/proc), per message. ``--profile`` samples the FerryMQ broker
with py-spy (if installed: ``.venv/bin/pip install --target .cache/tools/py-spy py-spy``) and
prints its hot spots.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ferrymq.client.admin import AdminClient  # noqa: E402
from ferrymq.client.producer import Producer  # noqa: E402
from ferrymq.client.pull_consumer import PullConsumer, PullStatus  # noqa: E402
from ferrymq.common.message import Message  # noqa: E402
from testkit import machine  # noqa: E402
from testkit.processes import StandaloneProcess  # noqa: E402
from testkit.wait import wait_until  # noqa: E402

import targets  # noqa: E402  (bench/, beside this script: how the rounds are judged)
SCENARIOS = ("sync1", "sync64", "batch32", "pull")  # the default set; syncN and batchK take any N, K
SCENARIO_RE = re.compile(r"sync[1-9]\d*|batch[1-9]\d*|pull")


def describe(scenario: str) -> str:
    if scenario == "pull":
        return "pull 32 per request, drain the topic, 1 puller per queue (8 in flight); latency per pull"
    if scenario.startswith("sync"):
        n = int(scenario[4:])
        who = "one sender" if n == 1 else f"{n} concurrent senders"
        return f"sync send, {n} in flight ({who}); latency per send"
    return f"batch send of {scenario[5:]} messages, 1 batch in flight; latency per batch"


QUEUES = 8
TOPICS = {"python": "BenchPy", "java": "BenchJava"}
WARMUP_TOPIC = "BenchWarmup"

# Apache: the stock runbroker.sh wants 8 GiB; a 1 GiB heap, G1 (runbroker.sh's collector) and
# full JIT (the harness's test JVMs stop at C1 to start fast; a benchmark must not).
APACHE_BROKER_JVM = ("-Xms1g", "-Xmx1g", "-XX:MaxDirectMemorySize=1g", "-XX:+UseG1GC",
                     "-XX:G1HeapRegionSize=16m", "-XX:-UsePerfData")
# Apache's own defaults where the harness shrinks them for tests (FerryMQ has the same defaults).
APACHE_BROKER_CONF = {"mappedFileSizeCommitLog": str(1024 * 1024 * 1024),
                      "mappedFileSizeConsumeQueue": str(300_000 * 20)}
# The Java load generator: bigger heap than the harness's short-lived clients, full JIT.
LOADGEN_JVM = ("-Xms256m", "-Xmx512m", "-XX:TieredStopAtLevel=4")


# --messages, --seconds, --warmup and --broker-warmup: (full run, --quick) defaults
BOUNDS = {"messages": (50000, 5000), "seconds": (15.0, 5.0), "warmup": (5000, 1000), "broker_warmup": (20000, 10000)}


def add_bound_arguments(parser: argparse.ArgumentParser, bounds: dict[str, tuple], per: str) -> None:
    """The options bounding each measurement (``per`` names one), defaults in ``bounds`` as
    (full run, --quick), filled in by ``parse_bounded_args``."""
    helps = {"rounds": f"rounds of each {per}, the median taken", "messages": f"messages per {per}",
             "seconds": f"time bound per {per}",
             "warmup": f"warm-up messages before each {per}, not measured",
             "broker_warmup": "messages sent and pulled once per broker start, before any measurement"}
    for name, (full, quick) in bounds.items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(full), default=None,
                            help=f"{helps[name]} (default {full:g}; quick {quick:g})")


def parse_bounded_args(parser: argparse.ArgumentParser, bounds: dict[str, tuple]) -> argparse.Namespace:
    """The arguments, each bound left out taking its full or --quick default; at least one round."""
    args = parser.parse_args()
    for name, (full, quick) in bounds.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Machine facts


def python_loop_seconds(iterations: int = 10_000_000) -> float:
    """CPU seconds of an empty Python loop: how fast this host runs CPython now. Hosts of one
    kind differed 2x between sessions (0.55 s against 1.4 s) while the outside-load figure
    saw nothing: compare runs only at similar values."""
    started = time.process_time()
    for _ in range(iterations):
        pass
    return round(time.process_time() - started, 2)


def machine_info() -> dict:
    """testkit.machine's description, with the commit and what a benchmark's figures depend on."""
    commit = machine.git_commit(short=True)
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        **machine.machine_info(),
        "ferrymq_commit": commit["commit"] + ("+dirty" if commit["dirty"] else ""),
        "python_loop_s": python_loop_seconds(),
        "disk_used_pct": disk_used_percent(),
    }


def disk_used_percent(path: Path = REPO) -> float:
    """How full the file system holding ``path`` (the brokers' stores live under the repository's
    .cache and the system's temporary directory, one file system on the machines we bench) is, as df says."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize  # df's Use%: the root-reserved blocks do not count
    return round(100.0 * used / usable, 1) if usable else 0.0


def _all_cpus_seconds() -> list[float]:
    """/proc/stat's first line since boot, in seconds: user nice system idle iowait irq softirq steal ..."""
    ticks = os.sysconf("SC_CLK_TCK")
    return [int(x) / ticks for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]


def system_busy_seconds() -> float:
    """CPU seconds all CPUs spent busy since boot (everything but idle and iowait)."""
    t = _all_cpus_seconds()
    return sum(t[:8]) - t[3] - t[4]


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave other guests while this machine wanted them, since boot
    (steal): counted in ``system_busy_seconds``, reported apart (a shared VM)."""
    return _all_cpus_seconds()[7]


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (brokers, JVMs: all reaped by the end)."""
    import resource

    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def proc_cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (USER_HZ = 100)."""
    if not pid:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


# ---------------------------------------------------------------------------------------------
# Brokers


class OutsideLoad:
    """The run's wall time and what else the machine did meanwhile: everything else competes
    for the same 2 cores, so every report says how much there was."""

    def __init__(self, info: dict) -> None:
        self.info = info
        info["loadavg_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        self._busy0, self._own0, self._t0 = system_busy_seconds(), own_cpu_seconds(), time.monotonic()
        self._steal0 = steal_seconds()

    def finish(self) -> None:
        info = self.info
        info["elapsedS"] = round(time.monotonic() - self._t0, 1)
        other = (system_busy_seconds() - self._busy0) - (own_cpu_seconds() - self._own0)
        info["other_cpu_cores"] = round(max(0.0, other) / max(info["elapsedS"], 1e-9), 2)
        info["steal_cores"] = round((steal_seconds() - self._steal0) / max(info["elapsedS"], 1e-9), 2)


def outside_load_line(info: dict, warning: str = "figures are disturbed") -> str:
    """The report's line on what else the machine did during the run (``OutsideLoad``)."""
    other = info.get("other_cpu_cores", 0)
    disk = info.get("disk_used_pct")
    return (f"load average before the run: {info.get('loadavg_before')}   CPU used by other processes during the run: "
            f"{other:.2f} cores on average (of which hypervisor steal {info.get('steal_cores', 0):.2f})"
            + (f"   disk {disk:.0f} % used" if disk is not None else "")
            + (f"   WARNING: the machine was not idle, {warning}" if other > 0.15 else "")
            + (f"   WARNING: the disk is {disk:.0f} % full (Apache refuses writes at 90 %)"
               if disk is not None and disk > targets.DISK_FULL_PCT else ""))


async def apache_available(without: str) -> bool:
    """Whether the Apache RocketMQ jars are there (fetched once); if not, says what runs ``without`` them."""
    try:
        from testkit.java_client import CompatUnavailable, ensure_compat_classes

        await asyncio.to_thread(ensure_compat_classes)
        return True
    except CompatUnavailable as e:
        log(f"Apache RocketMQ jars unavailable ({e.reason}): {without}")
        return False


def print_problems(p, results: dict) -> None:
    """Each broker's warning and error log lines, if any."""
    for name, r in results.items():
        if r.get("problems"):
            p("")
            p(f"{name} broker log: {len(r['problems'])} warning/error lines, first ones:")
            for line in r["problems"][:10]:
                p(f"  {line[:200]}")


def write_json(path: str | None, info: dict, args, results: dict, rounds: list[dict] | None = None) -> None:
    """``results``: the first round; ``rounds`` (with --rounds > 1): every round's, the first included."""
    if path:
        doc = {"machine": info, "args": vars(args), "results": results}
        if rounds is not None:
            doc["rounds"] = rounds
        Path(path).write_text(json.dumps(doc, indent=2))
        print(f"results written to {path}")


class FerryBroker:
    name = "FerryMQ"

    def __init__(self, workdir: Path, flush: str = "ASYNC_FLUSH") -> None:
        self.proc = StandaloneProcess(workdir / "ferrymq-data", [f"flushDiskType={flush}"])

    def start(self) -> None:
        self.proc.start()

    @property
    def namesrv_addr(self) -> str:
        return self.proc.namesrv_addr

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    async def create_topic(self, topic: str) -> None:
        async with AdminClient(namesrv_addr=self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queues=QUEUES, write_queues=QUEUES)

    def problems(self) -> list[str]:
        """Warnings, errors and tracebacks in the broker's log."""
        lines = self.proc.log().splitlines()
        return [ln for ln in lines if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Exception", ln)]

    def stop(self) -> None:
        rc = self.proc.stop()
        if rc:
            log(f"FerryMQ standalone exited with {rc}")


class ApacheBroker:
    """Apache's broker under the harness's 4.9.7 name server; ``version`` 4.9.7 unless given
    (testkit.java_client.ROCKETMQ5_VERSION: the 5.3.1 broker)."""

    name = "Apache"  # read from the class too (amain's rounds); an instance may be named apart

    def __init__(self, workdir: Path, flush: str = "ASYNC_FLUSH", version: str | None = None,
                 name: str = "Apache") -> None:
        from testkit.apache import ApacheRocketMQ
        from testkit.java_client import ROCKETMQ_VERSION

        self.name = name
        self.mq = ApacheRocketMQ(broker_version=version or ROCKETMQ_VERSION, broker_jvm_opts=APACHE_BROKER_JVM,
                                 broker_conf={**APACHE_BROKER_CONF, "flushDiskType": flush},
                                 workdir=workdir / "apache")

    def start(self) -> None:
        self.mq.start()

    @property
    def namesrv_addr(self) -> str:
        return self.mq.namesrv_addr

    @property
    def pid(self) -> int | None:
        for p in self.mq._procs:  # the harness keeps its processes here; only the pid is read
            if p.name == "broker":
                return p.popen.pid
        return None

    async def create_topic(self, topic: str) -> None:
        from testkit.java_client import run_mqadmin

        await asyncio.to_thread(run_mqadmin, self.namesrv_addr, "updateTopic", "-c", self.mq.cluster_name,
                                "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))

    def problems(self) -> list[str]:
        return []

    def stop(self) -> None:
        self.mq.stop()


async def wait_for_route(namesrv: str, topic: str, timeout: float = 30) -> None:
    """Until the name server lists ``topic`` with 8 writable queues."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        async def routed() -> bool:
            try:
                route = await admin.topic_route(topic)
            except Exception:  # noqa: BLE001 - not there yet
                return False
            return sum(q.write_queue_nums for q in route.queue_datas) >= QUEUES

        await wait_until(routed, timeout, f"a route for {topic} with {QUEUES} queues", interval=0.2)


async def prepare_topics(broker, topics: list[str]) -> None:
    """Create ``topics`` on a started broker and wait until the name server routes them all."""
    for topic in topics:
        await broker.create_topic(topic)
    for topic in topics:
        await wait_for_route(broker.namesrv_addr, topic)


async def warm_up_broker(broker, messages: int, seconds: float, size: int) -> None:
    """Not measured: ``messages`` sent (sync64, batch32) and pulled on WARMUP_TOPIC, so a JVM
    broker has compiled its hot paths before the first figure."""
    log(f"  broker warm-up: {messages} messages (sync64, batch32, pull)")
    warm = PythonLoad(broker.namesrv_addr, WARMUP_TOPIC, bytes(size), None)
    await asyncio.wait_for(warm.run(["sync64", "batch32", "pull"], messages, seconds, 0, quiet=True),
                           3 * seconds + 60)


# ---------------------------------------------------------------------------------------------
# Load generator (a): FerryMQ's Python client


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest rank."""
    if not sorted_values:
        return None
    idx = math.ceil(p * len(sorted_values)) - 1
    return sorted_values[max(0, min(len(sorted_values) - 1, idx))]


def summarize(lat_ns: list[int], messages: int, errors: int, first_error: str | None, elapsed: float,
              client_cpu: float, broker_cpu: float) -> dict:
    lat = sorted(x / 1e6 for x in lat_ns)
    return {
        "messages": messages, "requests": len(lat), "errors": errors, "firstError": first_error,
        "elapsedS": elapsed, "msgsPerSec": messages / elapsed if elapsed > 0 else 0.0,
        "p50Ms": percentile(lat, 0.50), "p99Ms": percentile(lat, 0.99), "maxMs": lat[-1] if lat else None,
        "clientCpuS": client_cpu, "brokerCpuS": broker_cpu,
    }


class PythonLoad:
    def __init__(self, namesrv: str, topic: str, body: bytes, broker_pid: int | None) -> None:
        self.namesrv, self.topic, self.body, self.broker_pid = namesrv, topic, body, broker_pid

    async def _sends(self, concurrency: int, per_op: int, total: int, seconds: float, op) -> dict:
        claimed = 0
        done = 0
        errors = 0
        first_error: str | None = None
        lat: list[int] = []
        cpu0, broker0 = time.process_time(), proc_cpu_seconds(self.broker_pid)
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker() -> None:
            nonlocal claimed, done, errors, first_error
            while claimed + per_op <= total and time.perf_counter() < deadline:
                claimed += per_op
                s = time.perf_counter_ns()
                try:
                    await op()
                except Exception as e:  # noqa: BLE001 - counted and reported
                    errors += 1
                    first_error = first_error or f"{type(e).__name__}: {e}"
                    continue
                lat.append(time.perf_counter_ns() - s)
                done += per_op

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        return summarize(lat, done, errors, first_error, elapsed, time.process_time() - cpu0,
                         proc_cpu_seconds(self.broker_pid) - broker0)

    async def _pulls(self, consumer: PullConsumer, total: int, seconds: float) -> dict:
        queues = await consumer.fetch_queues(self.topic)
        done = 0
        errors = 0
        first_error: str | None = None
        lat: list[int] = []
        cpu0, broker0 = time.process_time(), proc_cpu_seconds(self.broker_pid)
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker(mq) -> None:
            nonlocal done, errors, first_error
            offset = 0
            while done < total and time.perf_counter() < deadline:
                s = time.perf_counter_ns()
                try:
                    result = await consumer.pull(mq, offset, max_nums=32)
                except Exception as e:  # noqa: BLE001 - counted and reported
                    errors += 1
                    first_error = first_error or f"{type(e).__name__}: {e}"
                    if errors > 100:
                        return
                    continue
                lat.append(time.perf_counter_ns() - s)
                if result.status is not PullStatus.FOUND:
                    return
                done += len(result.messages)
                offset = result.next_begin_offset

        await asyncio.gather(*(worker(mq) for mq in queues))
        elapsed = time.perf_counter() - t0
        out = summarize(lat, done, errors, first_error, elapsed, time.process_time() - cpu0,
                        proc_cpu_seconds(self.broker_pid) - broker0)
        out["queues"] = len(queues)
        return out

    async def run(self, scenarios: list[str], messages: int, seconds: float, warmup: int,
                  quiet: bool = False) -> dict[str, dict]:
        results: dict[str, dict] = {}
        producer = await Producer(f"bench_py_p_{os.getpid()}", namesrv_addr=self.namesrv, send_timeout=10.0).start()
        consumer: PullConsumer | None = None
        try:
            for scenario in scenarios:
                if not quiet:
                    log(f"  python client: {scenario}")
                if scenario.startswith("sync"):
                    concurrency = int(scenario[4:])

                    async def op() -> None:
                        await producer.send(Message(self.topic, self.body, properties={"TAGS": "TagA"}))

                    if warmup:
                        await self._sends(concurrency, 1, warmup, seconds, op)
                    results[scenario] = await self._sends(concurrency, 1, messages, seconds, op)
                elif scenario.startswith("batch"):
                    k = int(scenario[5:])

                    async def op() -> None:  # noqa: F811 - one op per scenario
                        await producer.send_batch([Message(self.topic, self.body, properties={"TAGS": "TagA"})
                                                   for _ in range(k)])

                    if warmup:
                        await self._sends(1, k, warmup, seconds, op)
                    results[scenario] = await self._sends(1, k, messages, seconds, op)
                elif scenario == "pull":
                    consumer = consumer or await PullConsumer(f"bench_py_c_{os.getpid()}",
                                                              namesrv_addr=self.namesrv).start()
                    if warmup:
                        await self._pulls(consumer, warmup, seconds)
                    results[scenario] = await self._pulls(consumer, 1 << 62, seconds)
                else:
                    raise ValueError(f"unknown scenario {scenario}")
        finally:
            await producer.close()
            if consumer:
                await consumer.close()
        return results


# ---------------------------------------------------------------------------------------------
# Load generator (b): the official Java client (ferrymq.compat.BenchLoad)


def java_load(namesrv: str, topic: str, scenarios: list[str], messages: int, seconds: float, warmup: int,
              size: int, broker_pid: int | None) -> dict[str, dict]:
    from testkit.java_client import java_client_command

    args = ["--namesrv", namesrv, "--topic", topic, "--scenarios", ",".join(scenarios),
            "--messages", str(messages), "--seconds", str(int(seconds)), "--warmup", str(warmup),
            "--size", str(size), "--broker-pid", str(broker_pid or 0)]
    cmd = java_client_command(args, main="ferrymq.compat.BenchLoad", jvm_args=LOADGEN_JVM)
    timeout = len(scenarios) * (2 * seconds + 15) + 60
    log(f"  java client: {','.join(scenarios)} (one JVM)")
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    results: dict[str, dict] = {}
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "result":
                results[event.pop("scenario")] = event
            elif event.get("event") == "error":
                log(f"  java client error: {event.get('error')}")
    if proc.returncode != 0:
        log(f"  java client exited {proc.returncode}; stderr tail:\n{proc.stderr[-3000:]}")
    return results


# ---------------------------------------------------------------------------------------------
# Profiling the FerryMQ broker (optional)


def find_py_spy() -> str | None:
    return shutil.which("py-spy") or next(
        (str(p) for p in [REPO / ".cache/tools/py-spy/bin/py-spy"] if p.is_file()), None)


# Leaf frames of a thread that is waiting, not working.
_IDLE = re.compile(r"EpollSelector\.select|_worker \(concurrent/futures/thread\.py:81\)|Condition\.wait|Thread\.join"
                   r"|_wait_for_tstate_lock|Event\.wait")


class PySpy:
    """``py-spy record --format raw --threads`` on a pid until stopped; then the hottest functions."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.out = out
        exe = find_py_spy()
        if not exe:
            raise RuntimeError("py-spy not found (.venv/bin/pip install --target .cache/tools/py-spy py-spy)")
        self.proc = subprocess.Popen([exe, "record", "-p", str(pid), "-o", str(out), "--format", "raw", "-r", str(rate),
                                      "--threads"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def report(self, top: int = 20) -> str:
        return summarize_profile(self.out, top)


def summarize_profile(path: Path, top: int = 20) -> str:
    """Per-thread busy share, then self and inclusive time of the busy (non-idle) samples."""
    if not path.is_file():
        return f"(no profile at {path})"
    total: collections.Counter[str] = collections.Counter()
    busy: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        thread = re.sub(r"_\d+$", "_N", re.sub(r"^thread \(\d+\): ", "", frames[0]))
        total[thread] += n
        funcs = [re.sub(r":\d+\)$", ")", f) for f in frames[1:] if f]
        if not funcs or _IDLE.search(frames[-1]):
            continue
        busy[thread] += n
        own[f"[{thread}] {funcs[-1]}"] += n
        for f in set(funcs):
            if "ferrymq/" in f and "ferrymq/cli/" not in f:
                inclusive[f"[{thread}] {f}"] += n
    all_busy = sum(busy.values())
    if not all_busy:
        return "(empty profile)"
    out = [f"py-spy profile of the FerryMQ broker process: {sum(total.values())} samples, {all_busy} busy"]
    out.append("busy share of each thread's samples:")
    for thread, n in total.most_common():
        out.append(f"  {thread:<20} {100 * busy[thread] / n:5.1f}% busy ({busy[thread]} of {n})")
    out.append("self time, % of all busy samples:")
    out += [f"  {100 * n / all_busy:5.1f}%  {name}" for name, n in own.most_common(top)]
    out.append("inclusive time of FerryMQ functions, % of all busy samples:")
    out += [f"  {100 * n / all_busy:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Orchestration and reporting


async def bench_broker(broker, args, scenarios: list[str], clients: list[str], workdir: Path) -> dict:
    out: dict = {"clients": {}, "problems": []}
    t0 = time.monotonic()
    log(f"{broker.name}: starting")
    try:
        broker.start()
    except Exception as e:  # noqa: BLE001 - report it, go on with the other broker
        log(f"{broker.name} did not start: {type(e).__name__}: {e}")
        out["clients"] = {c: {"failed": f"broker did not start: {e}"} for c in clients}
        return out
    out["startupS"] = time.monotonic() - t0
    profiler = None
    try:
        await prepare_topics(broker, [WARMUP_TOPIC, *(TOPICS[c] for c in clients)])
        if args.broker_warmup:
            await warm_up_broker(broker, args.broker_warmup, args.seconds, args.size)
        if args.profile and isinstance(broker, FerryBroker):
            prof_dir = REPO / ".cache" / "bench"
            prof_dir.mkdir(parents=True, exist_ok=True)
            profiler = PySpy(broker.pid, prof_dir / f"ferrymq-profile-{time.strftime('%Y%m%d-%H%M%S')}.raw")
            log(f"  profiling the FerryMQ broker into {profiler.out}")
        body = bytes((ord("a") + i % 26) for i in range(args.size))
        for client in clients:
            topic = TOPICS[client]
            try:
                if client == "python":
                    load = PythonLoad(broker.namesrv_addr, topic, body, broker.pid)
                    res = await asyncio.wait_for(load.run(scenarios, args.messages, args.seconds, args.warmup),
                                                 len(scenarios) * (2 * args.seconds + 30) + 30)
                else:
                    res = await asyncio.to_thread(java_load, broker.namesrv_addr, topic, scenarios, args.messages,
                                                  args.seconds, args.warmup, args.size, broker.pid)
            except Exception as e:  # noqa: BLE001 - one failing generator must not lose the rest
                log(f"  {client} client FAILED on {broker.name}: {type(e).__name__}: {e}")
                res = {"failed": f"{type(e).__name__}: {e}"}
            out["clients"][client] = res
        if profiler:
            profiler.stop()
            out["profile"] = profiler.report()
    finally:
        if profiler and profiler.proc.poll() is None:
            profiler.stop()
        out["problems"] = broker.problems()
        broker.stop()
    return out


def _num(v, fmt: str, missing: str = "-") -> str:
    return missing if v is None else format(v, fmt)


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "-"
    return f"{a / b:.2f}x"


def print_report(info: dict, results: dict, args, scenarios: list[str], clients: list[str], file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("")
    p("FerryMQ broker benchmark")
    p(f"date {info['date']}   cpu {info['cpu']}   nproc {info['nproc']}   memory {info['memory_gib']} GiB   "
      f"kernel {info['kernel']}")
    p(f"python {info['python']} ({info.get('python_interpreter', '?')})   java: {info['java']}   ferrymq {info['ferrymq_commit']}   "
      f"CPU calibration: a 10 M-iteration Python loop took {info.get('python_loop_s', '?')} s")
    p(f"bodies {args.size} B   per scenario: at most {args.messages} messages or {args.seconds:g} s, "
      f"after {args.warmup} warm-up messages")
    p(f"topics: {QUEUES} queues   brokers: {args.flush} on 127.0.0.1, each warmed up with {args.broker_warmup} messages "
      f"first   ratio F/A = FerryMQ / Apache: msgs/s > 1 means FerryMQ is faster, latency > 1 means slower")
    p(outside_load_line(info))
    for name, r in results.items():
        p(f"{name}: started in {r.get('startupS', 0):.1f}s")
    brokers = list(results)
    for scenario in scenarios:
        p("")
        p(f"== {scenario}: {describe(scenario)} ({args.size} B bodies) ==")
        header = (f"  {'load generator':<15} {'broker':<10} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
                  f"{'msgs':>7} {'errors':>6} {'broker CPU us/msg':>18}")
        p(header)
        for client in clients:
            rows = {}
            for b in brokers:
                r = results[b]["clients"].get(client, {})
                if "failed" in r:
                    p(f"  {client + ' client':<15} {b:<10} FAILED: {r['failed'][:80]}")
                    continue
                s = r.get(scenario)
                if not s:
                    p(f"  {client + ' client':<15} {b:<10} (no result)")
                    continue
                rows[b] = s
                cpu = s.get("brokerCpuS")
                cpu_per = 1e6 * cpu / s["messages"] if cpu is not None and s.get("messages") else None
                p(f"  {client + ' client':<15} {b:<10} {s['msgsPerSec']:>10,.0f} {_num(s['p50Ms'], '8.2f'):>8} "
                  f"{_num(s['p99Ms'], '8.2f'):>8} {_num(s['maxMs'], '8.1f'):>8} {s['messages']:>7} {s['errors']:>6} "
                  f"{_num(cpu_per, '18.1f'):>18}")
                if s.get("errors"):
                    p(f"  {'':<15} {'':<10} first error: {s.get('firstError')}")
            if "FerryMQ" in rows and "Apache" in rows:
                f, a = rows["FerryMQ"], rows["Apache"]
                p(f"  {'':<15} {'F/A ratio':<10} {_ratio(f['msgsPerSec'], a['msgsPerSec']):>10} "
                  f"{_ratio(f['p50Ms'], a['p50Ms']):>8} {_ratio(f['p99Ms'], a['p99Ms']):>8}")
    # one-screen summary
    if len(brokers) == 2:
        p("")
        p("== summary: FerryMQ / Apache (msgs/s ratio > 1 means FerryMQ is faster) ==")
        p(f"  {'scenario':<9} {'client':<7} {'FerryMQ msgs/s':>15} {'Apache msgs/s':>14} {'ratio':>7} "
          f"{'p50 F/A ms':>15} {'p99 F/A ms':>15}")
        for scenario in scenarios:
            for client in clients:
                f = results["FerryMQ"]["clients"].get(client, {}).get(scenario)
                a = results["Apache"]["clients"].get(client, {}).get(scenario)
                if not f or not a:
                    continue
                p(f"  {scenario:<9} {client:<7} {f['msgsPerSec']:>15,.0f} {a['msgsPerSec']:>14,.0f} "
                  f"{_ratio(f['msgsPerSec'], a['msgsPerSec']):>7} "
                  f"{_num(f['p50Ms'], '.2f') + '/' + _num(a['p50Ms'], '.2f'):>15} "
                  f"{_num(f['p99Ms'], '.2f') + '/' + _num(a['p99Ms'], '.2f'):>15}")
    print_problems(p, results)
    for r in results.values():
        if r.get("profile"):
            p("")
            p(r["profile"])


def print_rounds(rounds: list[dict], scenarios: list[str], file=sys.stdout) -> None:
    """Each scenario's msgs/s F/A over the rounds, as bench/targets.py judges them (its median)."""
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("")
    p(f"== rounds: FerryMQ / Apache msgs/s, every round's ratio ({targets.LOAD_CLIENT} client) and the median "
      "judged ==")
    for scenario in scenarios:
        try:
            found = targets.broker_rounds({"rounds": rounds}, scenario)
        except targets.Missing as e:
            p(f"  {scenario:<9} missing ({e})")
            continue
        p(f"  {scenario:<9} " + "  ".join(targets.times(r) for r, _, _ in found)
          + f"   median {targets.times(targets.median_round(found)[0])}")


async def amain(args) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for s in scenarios:
        if not SCENARIO_RE.fullmatch(s):
            raise SystemExit(f"unknown scenario {s}: syncN, batchK or pull (default {','.join(SCENARIOS)})")
    if ("java" in clients or args.only != "ferrymq") and \
            not await apache_available("FerryMQ with the Python client only"):
        clients = [c for c in clients if c != "java"]
        args.only = "ferrymq"
    info = machine_info()
    load = OutsideLoad(info)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as tmp:
        workdir = Path(tmp)
        kinds = [FerryBroker, ApacheBroker]
        if args.only == "ferrymq":
            kinds = [FerryBroker]
        elif args.only == "apache":
            kinds = [ApacheBroker]
        rounds: list[dict[str, dict]] = []
        for n in range(args.rounds):
            # Later rounds: the other broker first (drift of the machine hits both alike), only
            # the client the ratios are taken with, fresh data (the pull drains what the sends put).
            order = kinds if n % 2 == 0 else kinds[::-1]
            round_clients = clients if n == 0 else [c for c in clients if c == targets.LOAD_CLIENT] or clients
            if args.rounds > 1:
                log(f"round {n + 1} of {args.rounds}: {', '.join(k.name for k in order)}")
            round_dir = workdir / f"round{n + 1}"
            round_dir.mkdir()
            results = {}
            for kind in order:
                broker = kind(round_dir, args.flush)
                results[broker.name] = await bench_broker(broker, args, scenarios, round_clients, round_dir)
            rounds.append({k.name: results[k.name] for k in kinds if k.name in results})
            shutil.rmtree(round_dir, ignore_errors=True)
    load.finish()
    results = rounds[0]
    print_report(info, results, args, scenarios, clients)
    if len(rounds) > 1:
        print_rounds(rounds, scenarios)
    print(f"\nbenchmark run time: {info['elapsedS']:.0f} s")
    write_json(args.json, info, args, results, rounds if len(rounds) > 1 else None)
    failed = any("failed" in c for r in rounds for b in r.values() for c in b["clients"].values())
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts and time bounds (well under a minute)")
    add_bound_arguments(parser, BOUNDS, "scenario")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes (default 1024)")
    parser.add_argument("--only", choices=("ferrymq", "apache"), default=None, help="one broker only")
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                        help="flushDiskType of both brokers (SYNC_FLUSH: acknowledged after fsync, group commit)")
    parser.add_argument("--clients", default="python,java", help="load generators (default python,java)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"default {','.join(SCENARIOS)}")
    parser.add_argument("--profile", action="store_true", help="sample the FerryMQ broker with py-spy")
    parser.add_argument("--json", default=None, help="also write the raw results to this file")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each broker this many times, alternating which goes first; rounds after "
                             "the first run only the Java client; the summary takes the median ratio (default 1)")
    sys.exit(asyncio.run(amain(parse_bounded_args(parser, BOUNDS))))


if __name__ == "__main__":
    main()
