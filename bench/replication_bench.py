"""Replication: SYNC_MASTER beside ASYNC_MASTER, FerryMQ's master-slave pair against Apache
RocketMQ 4.9.7's own pair in the same run (issue 13's "Bench" line).

Not a test. Run: .venv/bin/python bench/replication_bench.py [--quick] [--roles ASYNC_MASTER,SYNC_MASTER]
                 [--only ferrymq|apache] [--clients java,python] [--scenarios sync1,sync64,batch32] [--json FILE]

For each broker and each master role (a fresh pair per role, on 127.0.0.1, both brokers
ASYNC_FLUSH, 1 GiB CommitLog files as bench/broker_bench.py runs them):

* FerryMQ: ``testkit/processes.BrokerPair``: ``ferrymq namesrv``, a master
  (``brokerRole`` = the role) and a slave (``brokerRole=SLAVE``, ``brokerId=1``, the master's HA
  address from the name server), three processes, /metrics on both brokers;
* Apache: the compat harness's ``ApacheRocketMQ`` twice: name server + master (broker JVM as
  bench/broker_bench.py starts it), then a slave (``brokerId=1``, ``haMasterAddress`` = the
  master's listenPort+1) registering with the master's name server (and the idle name server
  its own harness instance starts).

Once the slave has caught up with a probe message (so a SYNC_MASTER answers SEND_OK and an
ASYNC one replicates), each pair gets ``--broker-warmup`` unmeasured messages, then the
scenarios of bench/broker_bench.py (same load generators, imported: the official Java client
``ferrymq.compat.BenchLoad`` and FerryMQ's Python client), each after its own warm-up:
sync1 (one sender), sync64 (64 concurrent senders), batch32 (a batch of 32 in flight).

Per row: msgs/s, p50/p99 per request, errors, the master's CPU per message (as broker_bench)
and the slave's CPU per message over the same measured window (/proc; for the Java client the
window is the scenario's elapsed time ending when its result line arrived, from 20 Hz samples),
and the largest slave lag seen in that window (master's minus slave's commitLogMaxOffset from
GET_BROKER_RUNTIME_INFO, sampled twice a second). After the load, each pair's lag: at once, and
how long until the slave's CommitLog end equals the master's; for FerryMQ also its /metrics
replication gauges (ferrymq/broker/ha/metrics.py).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ferrymq.client.admin import AdminClient  # noqa: E402
from ferrymq.client.errors import MQClientError  # noqa: E402
from ferrymq.client.producer import Producer, SendStatus  # noqa: E402
from ferrymq.common.message import Message  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import BrokerPair  # noqa: E402
from broker_bench import (APACHE_BROKER_CONF, APACHE_BROKER_JVM, LOADGEN_JVM, QUEUES, TOPICS,  # noqa: E402
                          WARMUP_TOPIC, OutsideLoad, PythonLoad, _num, _ratio, apache_available, describe, log,
                          machine_info, outside_load_line, print_problems, proc_cpu_seconds, wait_for_route, write_json)

ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
SCENARIOS = ("sync1", "sync64", "batch32")
SHORT = {"ASYNC_MASTER": "ASYNC", "SYNC_MASTER": "SYNC"}
GIB = 1024 * 1024 * 1024
CLUSTER = "BenchHACluster"
BROKER_NAME = "bench-ha"
LAG_EVERY_S = 0.5  # runtime-info requests to both brokers twice a second: ~0.1 % of the master's CPU


# ---------------------------------------------------------------------------------------------
# The two pairs


class FerryPair:
    name = "FerryMQ"

    def __init__(self, workdir: Path, role: str, flush: str) -> None:
        self.role = role
        self.pair = BrokerPair(workdir / f"ferrymq-{role}", role,
                               [f"flushDiskType={flush}", f"mappedFileSizeCommitLog={GIB}",
                                f"brokerClusterName={CLUSTER}", f"brokerName={BROKER_NAME}"])
        self.pair.tmp.mkdir(parents=True)
        self.pair.http_ports.update(master=free_port(), slave=free_port())

    def start(self) -> None:
        self.pair.start_namesrv()
        self.pair.start_master()
        self.pair.start_slave()

    @property
    def namesrv_addr(self) -> str:
        return self.pair.namesrv

    @property
    def master_addr(self) -> str:
        return f"127.0.0.1:{self.pair.master_port}"

    @property
    def slave_addr(self) -> str:
        return f"127.0.0.1:{self.pair.slave_port}"

    @property
    def master_pid(self) -> int:
        return self.pair.processes["master"].proc.pid

    @property
    def slave_pid(self) -> int:
        return self.pair.processes["slave"].proc.pid

    async def create_topic(self, topic: str) -> None:
        async with AdminClient(namesrv_addr=self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queues=QUEUES, write_queues=QUEUES, cluster=CLUSTER)

    def replication_gauges(self) -> dict[str, float]:
        """The replication gauges of both brokers' /metrics, by name (master_/slave_ prefixed)."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for who, port in self.pair.http_ports.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
            for family in text_string_to_metric_families(text):
                if "replication" not in family.name:
                    continue
                for sample in family.samples:
                    out[f"{who}:{sample.name}"] = sample.value
        return out

    def problems(self) -> list[str]:
        import re

        lines = []
        for who in ("master", "slave"):
            proc = self.pair.processes.get(who)
            if proc:
                lines += [f"{who}: {ln}" for ln in proc.log().splitlines()
                          if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Exception", ln)]
        return lines

    def stop(self) -> None:
        self.pair.stop_all()


class ApachePair:
    name = "Apache"

    def __init__(self, workdir: Path, role: str, flush: str) -> None:
        from testkit.apache import ApacheRocketMQ

        self.role = role
        self.master = ApacheRocketMQ(cluster_name=CLUSTER, broker_name=BROKER_NAME, broker_jvm_opts=APACHE_BROKER_JVM,
                                     broker_conf={**APACHE_BROKER_CONF, "flushDiskType": flush, "brokerRole": role},
                                     workdir=workdir / f"apache-{role}-master")
        self.slave = None
        self._slave_args = dict(cluster_name=CLUSTER, broker_name=BROKER_NAME, broker_jvm_opts=APACHE_BROKER_JVM,
                                workdir=workdir / f"apache-{role}-slave")
        self.flush = flush

    def start(self) -> None:
        from testkit.apache import ApacheRocketMQ

        self.master.start()
        own_namesrv = free_port()
        # The harness always starts a name server; the slave registers with it (so the harness
        # sees it ready) and with the master's, where the clients look.
        self.slave = ApacheRocketMQ(namesrv_port=own_namesrv, **self._slave_args, broker_conf={
            **APACHE_BROKER_CONF, "flushDiskType": self.flush, "brokerId": "1", "brokerRole": "SLAVE",
            "haMasterAddress": f"127.0.0.1:{self.master.broker_port + 1}",
            "namesrvAddr": f"127.0.0.1:{own_namesrv};{self.master.namesrv_addr}"})
        self.slave.start()

    @property
    def namesrv_addr(self) -> str:
        return self.master.namesrv_addr

    @property
    def master_addr(self) -> str:
        return self.master.broker_addr

    @property
    def slave_addr(self) -> str:
        return self.slave.broker_addr

    @staticmethod
    def _broker_pid(mq) -> int | None:
        for p in mq._procs if mq else []:  # the harness keeps its processes here; only the pid is read
            if p.name == "broker":
                return p.popen.pid
        return None

    @property
    def master_pid(self) -> int | None:
        return self._broker_pid(self.master)

    @property
    def slave_pid(self) -> int | None:
        return self._broker_pid(self.slave)

    async def create_topic(self, topic: str) -> None:
        from testkit.java_client import run_mqadmin

        await asyncio.to_thread(run_mqadmin, self.namesrv_addr, "updateTopic", "-c", CLUSTER,
                                "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))

    def replication_gauges(self) -> dict[str, float]:
        return {}

    def problems(self) -> list[str]:
        return []

    def stop(self) -> None:
        if self.slave:
            self.slave.stop()
        self.master.stop()


# ---------------------------------------------------------------------------------------------
# Watching the pair: CPU of both brokers (20 Hz) and the slave's lag (2 Hz)


async def commit_log_ends(admin: AdminClient, pair) -> tuple[int, int]:
    """(master, slave) commitLogMaxOffset from GET_BROKER_RUNTIME_INFO: the slave's first, so
    that the difference is never below the lag (the master's end only grows)."""
    s = await admin.broker_runtime_info(pair.slave_addr)
    m = await admin.broker_runtime_info(pair.master_addr)
    return int(m["commitLogMaxOffset"]), int(s["commitLogMaxOffset"])


class Watcher:
    def __init__(self, pair, admin: AdminClient) -> None:
        self.pair, self.admin = pair, admin
        self.cpu: list[tuple[float, float, float]] = []  # (monotonic, master CPU s, slave CPU s)
        self.lag: list[tuple[float, int]] = []  # (monotonic, master end - slave end)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        next_lag = 0.0
        while True:
            now = time.monotonic()
            self.cpu.append((now, proc_cpu_seconds(self.pair.master_pid), proc_cpu_seconds(self.pair.slave_pid)))
            if now >= next_lag:
                next_lag = now + LAG_EVERY_S
                with contextlib.suppress(Exception):
                    m, s = await commit_log_ends(self.admin, self.pair)
                    self.lag.append((time.monotonic(), m - s))
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def slave_cpu_at(self, t: float) -> float | None:
        """The slave's CPU seconds at time ``t`` (past), interpolated between samples."""
        samples = list(self.cpu)
        i = bisect.bisect_left([c[0] for c in samples], t)
        if i == 0 or i >= len(samples):
            return None
        (ta, _, a), (tb, _, b) = samples[i - 1], samples[i]
        return a + (b - a) * (t - ta) / (tb - ta) if tb > ta else b

    def max_lag_between(self, t0: float, t1: float) -> int | None:
        seen = [lag for t, lag in self.lag if t0 <= t <= t1]
        return max(seen) if seen else None


async def wait_caught_up(admin: AdminClient, pair, timeout: float) -> tuple[int, int, float | None]:
    """Until the slave's CommitLog ends where the master's does: (master end, lag at first look,
    seconds it took or None)."""
    t0 = time.monotonic()
    first = None
    while True:
        with contextlib.suppress(Exception):
            m, s = await commit_log_ends(admin, pair)
            first = (m - s) if first is None else first
            if m > 0 and s >= m:
                return m, first, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return -1, first if first is not None else -1, None
        await asyncio.sleep(0.1)


async def wait_replicating(pair, topic: str, timeout: float = 90) -> None:
    """A probe message acknowledged SEND_OK (a SYNC_MASTER says so only once the slave has it)
    and the slave's CommitLog end equal to the master's."""
    deadline = time.monotonic() + timeout
    producer = await Producer(f"bench_ha_probe_{int(time.time())}", namesrv_addr=pair.namesrv_addr,
                              send_timeout=10.0).start()
    try:
        while True:
            status = None
            with contextlib.suppress(MQClientError, OSError, asyncio.TimeoutError):
                status = (await producer.send(Message(topic, b"probe"))).status
            if status is SendStatus.SEND_OK:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the master never acknowledged a probe SEND_OK (last: {status})")
            await asyncio.sleep(0.5)
    finally:
        await producer.close()
    async with AdminClient(namesrv_addr=pair.namesrv_addr) as admin:
        _, _, took = await wait_caught_up(admin, pair, max(5.0, deadline - time.monotonic()))
    if took is None:
        raise RuntimeError("the slave did not catch up with the master")


# ---------------------------------------------------------------------------------------------
# Load: broker_bench's generators, plus the slave's CPU


class PythonLoadWithSlave(PythonLoad):
    """broker_bench's Python generator; each measured run also gets the slave's CPU."""

    def __init__(self, namesrv: str, topic: str, body: bytes, master_pid: int | None, slave_pid: int | None,
                 watcher: Watcher) -> None:
        super().__init__(namesrv, topic, body, master_pid)
        self.slave_pid, self.watcher = slave_pid, watcher

    async def _sends(self, *a, **kw) -> dict:
        s0, t0 = proc_cpu_seconds(self.slave_pid), time.monotonic()
        out = await super()._sends(*a, **kw)
        out["slaveCpuS"] = proc_cpu_seconds(self.slave_pid) - s0
        out["maxLagBytes"] = self.watcher.max_lag_between(t0, time.monotonic())
        return out


def java_load_timed(namesrv: str, topic: str, scenarios: list[str], args, master_pid: int | None,
                    watcher: Watcher) -> dict[str, dict]:
    """bench/broker_bench.py's java_load (same program, arguments and JVM options), reading
    each result line as it comes, so that the scenario's measured window is known and the
    slave's CPU and lag over it can be taken from the watcher."""
    from testkit.java_client import java_client_command

    cmd = java_client_command(["--namesrv", namesrv, "--topic", topic, "--scenarios", ",".join(scenarios),
                               "--messages", str(args.messages), "--seconds", str(int(args.seconds)),
                               "--warmup", str(args.warmup), "--size", str(args.size),
                               "--broker-pid", str(master_pid or 0)],
                              main="ferrymq.compat.BenchLoad", jvm_args=LOADGEN_JVM)
    timeout = len(scenarios) * (2 * args.seconds + 15) + 60
    log(f"  java client: {','.join(scenarios)} (one JVM)")
    results: dict[str, dict] = {}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                t_end, slave_cpu_end = time.monotonic(), proc_cpu_seconds(watcher.pair.slave_pid)
                line = line.strip()
                if not line.startswith("{"):
                    continue
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == "result":
                        t_start = t_end - float(event.get("elapsedS") or 0)
                        slave_cpu_start = watcher.slave_cpu_at(t_start)
                        event["slaveCpuS"] = None if slave_cpu_start is None else slave_cpu_end - slave_cpu_start
                        event["maxLagBytes"] = watcher.max_lag_between(t_start, t_end)
                        results[event.pop("scenario")] = event
                    elif event.get("event") == "error":
                        log(f"  java client error: {event.get('error')}")
            rc = proc.wait()
        finally:
            timer.cancel()
        if rc != 0:
            err.seek(0)
            log(f"  java client exited {rc}; stderr tail:\n{err.read().decode(errors='replace')[-3000:]}")
    return results


# ---------------------------------------------------------------------------------------------
# One pair


async def bench_pair(pair, args, scenarios: list[str], clients: list[str]) -> dict:
    out: dict = {"clients": {}, "problems": []}
    t0 = time.monotonic()
    log(f"{pair.name} {pair.role}: starting name server, master, slave")
    try:
        await asyncio.to_thread(pair.start)
    except Exception as e:  # noqa: BLE001 - report it, go on with the others
        log(f"{pair.name} {pair.role} did not start: {type(e).__name__}: {e}")
        out["clients"] = {c: {"failed": f"pair did not start: {e}"} for c in clients}
        with contextlib.suppress(Exception):
            pair.stop()
        return out
    out["startupS"] = time.monotonic() - t0
    admin = await AdminClient(namesrv_addr=pair.namesrv_addr).__aenter__()
    watcher = Watcher(pair, admin)
    try:
        topics = [WARMUP_TOPIC, *(TOPICS[c] for c in clients)]
        for topic in topics:
            await pair.create_topic(topic)
        for topic in topics:
            await wait_for_route(pair.namesrv_addr, topic, timeout=60)
        t1 = time.monotonic()
        await wait_replicating(pair, WARMUP_TOPIC)
        out["slaveReadyS"] = time.monotonic() - t1
        log(f"  slave replicating ({out['slaveReadyS']:.1f}s after the topics)")
        watcher.start()
        if args.broker_warmup:
            log(f"  broker warm-up: {args.broker_warmup} messages (sync64, batch32)")
            warm = PythonLoad(pair.namesrv_addr, WARMUP_TOPIC, bytes(args.size), None)
            await asyncio.wait_for(warm.run(["sync64", "batch32"], args.broker_warmup, args.seconds, 0, quiet=True),
                                   2 * args.seconds + 60)
        body = bytes((ord("a") + i % 26) for i in range(args.size))
        for client in clients:
            topic = TOPICS[client]
            try:
                if client == "python":
                    load = PythonLoadWithSlave(pair.namesrv_addr, topic, body, pair.master_pid, pair.slave_pid,
                                               watcher)
                    res = await asyncio.wait_for(load.run(scenarios, args.messages, args.seconds, args.warmup),
                                                 len(scenarios) * (2 * args.seconds + 30) + 30)
                else:
                    res = await asyncio.to_thread(java_load_timed, pair.namesrv_addr, topic, scenarios, args,
                                                  pair.master_pid, watcher)
            except Exception as e:  # noqa: BLE001 - one failing generator must not lose the rest
                log(f"  {client} client FAILED on {pair.name} {pair.role}: {type(e).__name__}: {e}")
                res = {"failed": f"{type(e).__name__}: {e}"}
            out["clients"][client] = res
        await watcher.stop()
        # The slave's lag once the load stops: at once, then until the CommitLog ends meet.
        end, lag_now, took = await wait_caught_up(admin, pair, 60)
        out["lag"] = {"atEndBytes": lag_now, "caughtUpS": took, "masterEnd": end,
                      "maxDuringLoadBytes": max((lag for _, lag in watcher.lag), default=None)}
        with contextlib.suppress(Exception):
            out["lag"]["gauges"] = await asyncio.to_thread(pair.replication_gauges)
        log(f"  slave lag after the load: {lag_now} bytes, caught up in "
            f"{'-' if took is None else f'{took:.2f}s'} (master CommitLog end {end})")
    finally:
        await watcher.stop()
        await admin.__aexit__(None, None, None)
        out["problems"] = pair.problems()
        await asyncio.to_thread(pair.stop)
    return out


# ---------------------------------------------------------------------------------------------
# Report


def _per_msg(cpu, s) -> float | None:
    return 1e6 * cpu / s["messages"] if cpu is not None and s.get("messages") else None


def _kib(v) -> str:
    return "-" if v is None else f"{v / 1024:,.0f}"


def print_report(info: dict, results: dict, args, scenarios: list[str], clients: list[str], roles: list[str],
                 brokers: list[str], file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("")
    p("FerryMQ replication benchmark: master + 1 slave, ASYNC_MASTER and SYNC_MASTER")
    p(f"date {info['date']}   cpu {info['cpu']}   nproc {info['nproc']}   memory {info['memory_gib']} GiB   "
      f"kernel {info['kernel']}")
    p(f"python {info['python']}   java: {info['java']}   ferrymq {info['ferrymq_commit']}")
    p(f"bodies {args.size} B   per scenario: at most {args.messages} messages or {args.seconds:g} s, "
      f"after {args.warmup} warm-up messages")
    p(f"topics: {QUEUES} queues   brokers: {args.flush}, 1 GiB CommitLog files, on 127.0.0.1; a fresh name server + "
      f"master + slave per broker and role, warmed up with {args.broker_warmup} messages first")
    p("F/A = FerryMQ / Apache, SYNC/ASYNC = SYNC_MASTER / ASYNC_MASTER: msgs/s > 1 means faster, latency > 1 slower; "
      "CPU = the process's utime+stime per message; lag = master's minus slave's commitLogMaxOffset (2 Hz)")
    p(outside_load_line(info))
    for key, r in results.items():
        p(f"{key}: started in {r.get('startupS', 0):.1f}s, slave replicating {r.get('slaveReadyS', 0):.1f}s later")

    def row(b: str, role: str, client: str, scenario: str) -> dict | None:
        return results.get(f"{b} {role}", {}).get("clients", {}).get(client, {}).get(scenario)

    for scenario in scenarios:
        p("")
        p(f"== {scenario}: {describe(scenario)} ({args.size} B bodies) ==")
        p(f"  {'client':<7} {'broker':<8} {'role':<6} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'msgs':>7} {'errors':>6} {'master us/msg':>13} {'slave us/msg':>12} {'max lag KiB':>11}")
        for client in clients:
            for b in brokers:
                for role in roles:
                    r = results.get(f"{b} {role}", {}).get("clients", {}).get(client, {})
                    if "failed" in r:
                        p(f"  {client:<7} {b:<8} {SHORT[role]:<6} FAILED: {r['failed'][:80]}")
                        continue
                    s = r.get(scenario)
                    if not s:
                        p(f"  {client:<7} {b:<8} {SHORT[role]:<6} (no result)")
                        continue
                    p(f"  {client:<7} {b:<8} {SHORT[role]:<6} {s['msgsPerSec']:>9,.0f} {_num(s['p50Ms'], '8.2f'):>8} "
                      f"{_num(s['p99Ms'], '8.2f'):>8} {_num(s['maxMs'], '8.1f'):>8} {s['messages']:>7} "
                      f"{s['errors']:>6} {_num(_per_msg(s.get('brokerCpuS'), s), '13.1f'):>13} "
                      f"{_num(_per_msg(s.get('slaveCpuS'), s), '12.1f'):>12} {_kib(s.get('maxLagBytes')):>11}")
                    if s.get("errors"):
                        p(f"  {'':<7} {'':<8} {'':<6} first error: {s.get('firstError')}")
                a, sy = row(b, "ASYNC_MASTER", client, scenario), row(b, "SYNC_MASTER", client, scenario)
                if a and sy:
                    p(f"  {'':<7} {b:<8} {'S/A':<6} {_ratio(sy['msgsPerSec'], a['msgsPerSec']):>9} "
                      f"{_ratio(sy['p50Ms'], a['p50Ms']):>8} {_ratio(sy['p99Ms'], a['p99Ms']):>8}")
            for role in roles:
                f, a = row("FerryMQ", role, client, scenario), row("Apache", role, client, scenario)
                if f and a:
                    p(f"  {'':<7} {'F/A':<8} {SHORT[role]:<6} {_ratio(f['msgsPerSec'], a['msgsPerSec']):>9} "
                      f"{_ratio(f['p50Ms'], a['p50Ms']):>8} {_ratio(f['p99Ms'], a['p99Ms']):>8}")

    p("")
    p("== summary: msgs/s and p99 ms; F/A per role, SYNC/ASYNC per broker ==")
    p(f"  {'scenario':<9} {'client':<7} {'role':<6} {'FerryMQ':>9} {'Apache':>9} {'F/A':>7} "
      f"{'p99 F/A ms':>15} {'FerryMQ S/A':>12} {'Apache S/A':>11}")
    for scenario in scenarios:
        for client in clients:
            for role in roles:
                f, a = row("FerryMQ", role, client, scenario), row("Apache", role, client, scenario)
                if not f and not a:
                    continue
                fs = "" if role != "SYNC_MASTER" else _ratio(f and f["msgsPerSec"],
                                                             (row("FerryMQ", "ASYNC_MASTER", client, scenario) or {})
                                                             .get("msgsPerSec"))
                as_ = "" if role != "SYNC_MASTER" else _ratio(a and a["msgsPerSec"],
                                                              (row("Apache", "ASYNC_MASTER", client, scenario) or {})
                                                              .get("msgsPerSec"))
                p(f"  {scenario:<9} {client:<7} {SHORT[role]:<6} "
                  f"{_num(f and f['msgsPerSec'], ',.0f'):>9} {_num(a and a['msgsPerSec'], ',.0f'):>9} "
                  f"{_ratio(f and f['msgsPerSec'], a and a['msgsPerSec']):>7} "
                  f"{_num(f and f['p99Ms'], '.2f') + '/' + _num(a and a['p99Ms'], '.2f'):>15} {fs:>12} {as_:>11}")

    p("")
    p("== the slave's lag (master's minus slave's commitLogMaxOffset, GET_BROKER_RUNTIME_INFO) ==")
    for key, r in results.items():
        lag = r.get("lag")
        if not lag:
            p(f"  {key}: no lag figures (the run did not get that far)")
            continue
        took = lag.get("caughtUpS")
        p(f"  {key:<21} largest during the load {_kib(lag.get('maxDuringLoadBytes'))} KiB; when the load stopped "
          f"{lag['atEndBytes']:,} bytes behind, "
          + (f"equal ({lag['masterEnd']:,} bytes) {took:.2f} s later" if took is not None
             else "NOT caught up within 60 s"))
        gauges = lag.get("gauges")
        if gauges:
            p("  " + " " * 21 + " /metrics then: " + ", ".join(f"{k} {v:g}" for k, v in sorted(gauges.items())))
    print_problems(p, results)


# ---------------------------------------------------------------------------------------------


async def amain(args) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    for s in scenarios:
        if not (s.startswith("sync") or s.startswith("batch")) or not s[4 if s.startswith("sync") else 5:].isdigit():
            raise SystemExit(f"unknown scenario {s}: syncN or batchK")
    for r in roles:
        if r not in ROLES:
            raise SystemExit(f"unknown role {r}: {', '.join(ROLES)}")
    kinds = {"ferrymq": [FerryPair], "apache": [ApachePair]}.get(args.only, [FerryPair, ApachePair])
    if ApachePair in kinds or "java" in clients:
        if not await apache_available("FerryMQ with the Python client only"):
            clients = [c for c in clients if c != "java"] or ["python"]
            kinds = [FerryPair]
    brokers = [k.name for k in kinds]
    info = machine_info()
    load = OutsideLoad(info)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-ha-bench-") as tmp:
        for role in roles:  # FerryMQ then Apache for each role: drifting outside load hits both
            for kind in kinds:
                pair = kind(Path(tmp), role, args.flush)
                results[f"{pair.name} {role}"] = await bench_pair(pair, args, scenarios, clients)
    load.finish()
    print_report(info, results, args, scenarios, clients, roles, brokers)
    print(f"\nbenchmark run time: {info['elapsedS']:.0f} s")
    write_json(args.json, info, args, results)
    failed = any("failed" in c for r in results.values() for c in r["clients"].values())
    behind = any(r.get("lag", {}).get("caughtUpS") is None for r in results.values())
    return 1 if failed or behind else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts and time bounds (under 2 minutes)")
    parser.add_argument("--messages", type=int, default=None, help="messages per scenario (default 50000; quick 3000)")
    parser.add_argument("--seconds", type=float, default=None, help="time bound per scenario (default 15; quick 4)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up messages before each scenario (default 5000; quick 1000)")
    parser.add_argument("--broker-warmup", type=int, default=None,
                        help="messages sent once per pair before any scenario (default 20000; quick 5000)")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes (default 1024)")
    parser.add_argument("--only", choices=("ferrymq", "apache"), default=None, help="one broker only")
    parser.add_argument("--roles", default=",".join(ROLES), help=f"master roles (default {','.join(ROLES)})")
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                        help="flushDiskType of masters and slaves (default ASYNC_FLUSH)")
    parser.add_argument("--clients", default="java,python", help="load generators (default java,python)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"default {','.join(SCENARIOS)}")
    parser.add_argument("--json", default=None, help="also write the raw results to this file")
    args = parser.parse_args()
    if args.messages is None:
        args.messages = 3000 if args.quick else 50000
    if args.seconds is None:
        args.seconds = 4.0 if args.quick else 15.0
    if args.warmup is None:
        args.warmup = 1000 if args.quick else 5000
    if args.broker_warmup is None:
        args.broker_warmup = 5000 if args.quick else 20000
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
