"""Broker memory: RSS with many topics and many held pulls, FerryMQ against Apache RocketMQ 4.9.7.

Not a test. Run: .venv/bin/python bench/memory_bench.py [--quick] [--topics 1000] [--pulls 10000]
                 [--connections 100] [--only ferrymq|apache] [--json FILE]

Issue 11's memory row: broker RSS with 1 000 topics x 8 queues and 10 000 held pulls (target
FerryMQ <= 200 MiB). For each broker, on 127.0.0.1, ASYNC_FLUSH, 1 GiB CommitLog files:

* FerryMQ: ``ferrymq namesrv`` and ``ferrymq broker`` as two subprocesses, so the figures are
  the broker process alone (no name server in it);
* Apache: the compat harness's name server + broker, broker JVM as bench/broker_bench.py
  starts it (``-Xms1g -Xmx1g``, G1).

The broker process's /proc/PID/status (VmRSS = RssAnon + RssFile + RssShmem, and VmHWM, the
peak) is read at each phase, after the work of the phase is done and RSS has settled:

1. ``idle``      after start-up;
2. ``topics``    after creating the topics (UPDATE_AND_CREATE_TOPIC sent to the broker, as
                 ``mqadmin updateTopic -b`` does; FerryMQ's admin client for both brokers);
3. ``messages``  after one 1 KiB message on every queue (SEND_MESSAGE_V2 with the queue id);
4. ``held``      while ``--pulls`` PULL_MESSAGE requests are held (SUSPEND flag, 120 s suspend
                 timeout, offset = the queue's max offset), spread round-robin over all queues
                 and sent over ``--connections`` raw remoting connections;
5. ``answered``  after one more message on every queue woke them and every held pull was
                 answered with its message.

RssFile counts pages of mapped store files (CommitLog, ConsumeQueues) the process touched;
RssAnon is the heap (Python objects; for the JVM, the part of its 1 GiB heap it touched so far).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ferrymq.client.admin import AdminClient  # noqa: E402
from ferrymq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from ferrymq.remoting.command import RemotingCommand  # noqa: E402
from ferrymq.remoting.connection import Connection, open_connection  # noqa: E402
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag, SendMessageHeader  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import FerryProcess  # noqa: E402
from broker_bench import (APACHE_BROKER_JVM, ApacheBroker, OutsideLoad, apache_available, log,  # noqa: E402
                          machine_info, outside_load_line, print_problems, write_json)

PHASES = ("idle", "topics", "messages", "held", "answered")
STATUS_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads")
SUSPEND_MS = 120_000
GROUP = "mem_bench_group"
PRODUCER_GROUP = "mem_bench_producer"
BODY = b"m" * 1024


def proc_status(pid: int) -> dict[str, int]:
    """Memory (KiB) and thread count of a process, from /proc/PID/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_KEYS:
            out[key] = int(value.split()[0])
    return out


async def settled_status(pid: int, seconds: float = 1.0, timeout: float = 10.0) -> dict[str, int]:
    """/proc status once VmRSS has changed by less than 1 % over ``seconds`` (or at ``timeout``)."""
    deadline = time.monotonic() + timeout
    last = proc_status(pid)
    while True:
        await asyncio.sleep(seconds)
        now = proc_status(pid)
        if abs(now["VmRSS"] - last["VmRSS"]) < 0.01 * last["VmRSS"] or time.monotonic() > deadline:
            return now
        last = now


def jvm_heap_used_kib(pid: int) -> int | None:
    """The JVM's heap in use (live data plus garbage not yet collected), ``jcmd PID GC.heap_info``."""
    import re
    import shutil
    import subprocess

    jcmd = shutil.which("jcmd")
    if not jcmd:
        return None
    try:
        text = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"heap\s+total\s+\d+K,\s+used\s+(\d+)K", text)
    return int(m.group(1)) if m else None


async def phase_status(broker, pid: int, seconds: float = 1.0, timeout: float = 10.0) -> dict[str, int]:
    status = await settled_status(pid, seconds, timeout)
    if isinstance(broker, ApacheBrokerMem):
        heap = await asyncio.to_thread(jvm_heap_used_kib, pid)
        if heap is not None:
            status["HeapUsed"] = heap
    return status


# ---------------------------------------------------------------------------------------------
# Brokers


class FerryBrokerAlone:
    """``ferrymq namesrv`` + ``ferrymq broker``, two processes: the broker's RSS is its own."""

    name = "FerryMQ"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.namesrv = FerryProcess(["namesrv", "--port", str(self.namesrv_port)], "name server is ready",
                                    workdir / "ferrymq-namesrv.log")
        self.broker = FerryProcess(["broker", "--namesrv", f"127.0.0.1:{self.namesrv_port}",
                                    "--broker-port", str(self.broker_port), "--data-dir", str(workdir / "ferrymq-data")],
                                   "is ready on", workdir / "ferrymq-broker.log")

    def start(self) -> None:
        self.namesrv.start()
        self.broker.start()

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def pid(self) -> int:
        return self.broker.proc.pid

    def problems(self) -> list[str]:
        import re
        return [ln for ln in self.broker.log().splitlines()
                if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Exception", ln)]

    def stop(self) -> None:
        for p in (self.broker, self.namesrv):
            rc = p.stop()
            if rc:
                log(f"FerryMQ {p.args[0]} exited with {rc}")


class ApacheBrokerMem(ApacheBroker):
    @property
    def broker_addr(self) -> str:
        return self.mq.broker_addr


# ---------------------------------------------------------------------------------------------
# Load


async def connect(addr: str) -> Connection:
    host, _, port = addr.rpartition(":")
    return await open_connection(host, int(port))


def topic_name(i: int) -> str:
    return f"MemBench{i:04d}"


async def create_topics(namesrv: str, broker_addr: str, topics: list[str], queues: int) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        sem = asyncio.Semaphore(8)

        async def one(topic: str) -> None:
            async with sem:
                await admin.create_topic(topic, read_queues=queues, write_queues=queues, broker_addr=broker_addr)

        await asyncio.gather(*(one(t) for t in topics))


async def send_one_per_queue(conns: list[Connection], topics: list[str], queues: int) -> tuple[int, int]:
    """One message on every queue, a send refused as busy (SYSTEM_BUSY) retried after 50 ms as
    a client would; returns (stored, refusals)."""
    sem = asyncio.Semaphore(64)
    stored = refused = 0
    failures: list[str] = []

    async def one(i: int, topic: str, q: int) -> None:
        nonlocal stored, refused
        for _ in range(100):
            header = SendMessageHeader(PRODUCER_GROUP, topic, queue_id=q, born_timestamp=int(time.time() * 1000),
                                       default_topic_queue_nums=queues)
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(v2=True), body=BODY)
            async with sem:
                resp = await conns[i % len(conns)].invoke(req, 30)
            if resp.code == ResponseCode.SUCCESS:
                stored += 1
                return
            if resp.code != ResponseCode.SYSTEM_BUSY:
                break
            refused += 1
            await asyncio.sleep(0.05)
        if len(failures) < 3:
            failures.append(f"{resp.code} {resp.remark}")

    await asyncio.gather(*(one(i, t, q) for i, (t, q) in enumerate((t, q) for t in topics for q in range(queues))))
    if failures:
        log(f"  sends failed: {failures}")
    if refused:
        log(f"  {refused} sends refused as busy (retried)")
    return stored, refused


async def wait_dispatched(conns: list[Connection], topics: list[str], queues: int, expect: int,
                          timeout: float) -> float:
    """Until every queue's max offset (GET_MAX_OFFSET) is at least ``expect``: Apache builds its
    ConsumeQueues in a background thread (a new file per queue), so a send's success does not mean
    a pull at the new offset would be held yet. Returns the seconds waited."""
    t0 = time.monotonic()
    left = [(t, q) for t in topics for q in range(queues)]
    sem = asyncio.Semaphore(64)

    async def behind(i: int, topic: str, q: int) -> bool:
        async with sem:
            resp = await conns[i % len(conns)].invoke(
                RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}), 30)
        return resp.code != ResponseCode.SUCCESS or int(resp.ext_fields.get("offset", 0)) < expect

    while left:
        flags = await asyncio.gather(*(behind(i, t, q) for i, (t, q) in enumerate(left)))
        left = [tq for tq, b in zip(left, flags) if b]
        if not left:
            break
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{len(left)} queues still below offset {expect} after {timeout:.0f} s")
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


def pull_request(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    header = PullMessageHeader(GROUP, topic, queue_id, offset, 32, PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION,
                               0, SUSPEND_MS, subscription="*", expression_type="TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields())


# ---------------------------------------------------------------------------------------------


async def bench_broker(broker, args, workdir: Path) -> dict:
    out: dict = {"phases": {}, "problems": []}
    log(f"{broker.name}: starting")
    t0 = time.monotonic()
    try:
        broker.start()
    except Exception as e:  # noqa: BLE001 - report it, go on with the other broker
        log(f"{broker.name} did not start: {type(e).__name__}: {e}")
        out["failed"] = f"did not start: {e}"
        return out
    out["startupS"] = round(time.monotonic() - t0, 1)
    pid = broker.pid
    conns: list[Connection] = []
    try:
        await asyncio.sleep(3)  # let start-up work (registration, JIT of the first requests) finish
        out["phases"]["idle"] = await phase_status(broker, pid)
        log(f"  idle: {out['phases']['idle']}")

        topics = [topic_name(i) for i in range(args.topics)]
        t = time.monotonic()
        await asyncio.wait_for(create_topics(broker.namesrv_addr, broker.broker_addr, topics, args.queues),
                               args.timeout)
        out["createTopicsS"] = round(time.monotonic() - t, 1)
        out["phases"]["topics"] = await phase_status(broker, pid)
        log(f"  {args.topics} topics in {out['createTopicsS']} s: {out['phases']['topics']}")

        conns = [await connect(broker.broker_addr) for _ in range(args.connections)]
        t = time.monotonic()
        stored, out["busyRefusals"] = await asyncio.wait_for(send_one_per_queue(conns[:8], topics, args.queues),
                                                             args.timeout)
        out["sendS"] = round(time.monotonic() - t, 1)
        out["stored"] = stored
        out["dispatchWaitS"] = round(await wait_dispatched(conns[:8], topics, args.queues, 1, args.timeout), 1)
        out["phases"]["messages"] = await phase_status(broker, pid)
        log(f"  {stored} messages in {out['sendS']} s: {out['phases']['messages']}")

        # The held pulls: round-robin over every queue, at the queue's max offset (1).
        all_queues = [(tp, q) for tp in topics for q in range(args.queues)]
        pulls: list[asyncio.Future] = []
        t = time.monotonic()
        for i in range(args.pulls):
            tp, q = all_queues[i % len(all_queues)]
            pulls.append(conns[i % len(conns)].invoke_async(pull_request(tp, q, 1), SUSPEND_MS / 1000 + 60))
            if i % 500 == 499:
                await asyncio.sleep(0)  # let the connections write
        # Held = sent and not answered: wait until none was answered for 3 s after the last write.
        await asyncio.sleep(3)
        early = [f for f in pulls if f.done()]
        out["answeredEarly"] = len(early)
        if early:
            f = early[0]
            r = None if f.exception() else f.result()
            log(f"  {len(early)} pulls answered before any new message (first: {r and (r.code, r.remark)}; "
                f"{f.exception()!r})")
        out["held"] = args.pulls - len(early)
        out["phases"]["held"] = await phase_status(broker, pid, 2.0, 20.0)
        out["holdS"] = round(time.monotonic() - t, 1)
        log(f"  {out['held']} pulls held: {out['phases']['held']}")

        # A second message on every queue wakes them all.
        t = time.monotonic()
        stored2, out["busyRefusalsWaking"] = await asyncio.wait_for(
            send_one_per_queue(conns[:8], topics, args.queues), args.timeout)
        done, pending = await asyncio.wait(pulls, timeout=args.timeout)
        found = sum(1 for f in done if not f.exception() and f.result().code == ResponseCode.SUCCESS)
        out["wakeS"] = round(time.monotonic() - t, 1)
        out["answeredFound"] = found
        out["unanswered"] = len(pending)
        for f in pending:
            f.cancel()
        out["phases"]["answered"] = await phase_status(broker, pid, 2.0, 20.0)
        log(f"  {stored2} more messages, {found} pulls answered with a message, {len(pending)} unanswered, "
            f"in {out['wakeS']} s: {out['phases']['answered']}")
    except Exception as e:  # noqa: BLE001 - keep what was measured
        log(f"{broker.name} FAILED: {type(e).__name__}: {e}")
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        await asyncio.gather(*(c.close(0.5) for c in conns), return_exceptions=True)
        out["problems"] = broker.problems()
        broker.stop()
    return out


def mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:,.1f}"


def print_report(info: dict, results: dict, args, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("")
    p("FerryMQ broker memory benchmark")
    p(f"date {info['date']}   cpu {info['cpu']}   nproc {info['nproc']}   memory {info['memory_gib']} GiB   "
      f"kernel {info['kernel']}")
    p(f"python {info['python']}   java: {info['java']}   ferrymq {info['ferrymq_commit']}")
    p(f"{args.topics} topics x {args.queues} queues = {args.topics * args.queues} queues, {args.pulls} held pulls over "
      f"{args.connections} connections (suspend {SUSPEND_MS // 1000} s), 1 KiB messages, ASYNC_FLUSH, 127.0.0.1")
    p("FerryMQ: `ferrymq broker` process alone (name server in its own process); "
      f"Apache: broker JVM {' '.join(a for a in APACHE_BROKER_JVM if a.startswith('-Xm'))}")
    p(outside_load_line(info, "RSS is hardly affected, times are"))
    for name, r in results.items():
        if r.get("failed"):
            p(f"{name}: FAILED: {r['failed']}")
        p(f"{name}: started in {r.get('startupS', '-')} s, topics created in {r.get('createTopicsS', '-')} s, "
          f"{r.get('stored', '-')} messages in {r.get('sendS', '-')} s (in every ConsumeQueue "
          f"{r.get('dispatchWaitS', '-')} s later), {r.get('held', '-')} pulls held "
          f"({r.get('answeredEarly', '-')} answered early), {r.get('answeredFound', '-')} answered with a message "
          f"in {r.get('wakeS', '-')} s ({r.get('unanswered', '-')} unanswered; sends refused as busy and retried: "
          f"{r.get('busyRefusals', '-')} before, {r.get('busyRefusalsWaking', '-')} while waking the pulls)")
    p("")
    p("== broker RSS, MiB (VmRSS; in brackets RssAnon / RssFile; VmHWM = peak so far) ==")
    brokers = list(results)
    p(f"  {'phase':<10} " + " ".join(f"{b + ' RSS':>14} {'(anon / file)':>17} {b + ' HWM':>12}" for b in brokers)
      + ("   RSS F/A" if len(brokers) == 2 else ""))
    for phase in PHASES:
        cells = []
        rss = {}
        for b in brokers:
            s = results[b]["phases"].get(phase)
            if not s:
                cells.append(f"{'-':>14} {'':>17} {'-':>12}")
                continue
            rss[b] = s["VmRSS"]
            cells.append(f"{mib(s['VmRSS']):>14} {'(' + mib(s.get('RssAnon')) + ' / ' + mib(s.get('RssFile')) + ')':>17} "
                         f"{mib(s['VmHWM']):>12}")
        ratio = ""
        if len(rss) == 2 and rss.get("Apache"):
            ratio = f"   {rss['FerryMQ'] / rss['Apache']:.2f}x"
        p(f"  {phase:<10} " + " ".join(cells) + ratio)
    a = results.get("Apache", {}).get("phases", {})
    if any("HeapUsed" in st for st in a.values()):
        p("  Apache JVM heap in use (jcmd GC.heap_info: live data and garbage not yet collected; the rest of its "
          "RssAnon is heap touched earlier, metaspace, code, thread stacks, direct buffers), MiB: "
          + "  ".join(f"{ph} {mib(a[ph].get('HeapUsed'))}" for ph in PHASES if ph in a))
    f = results.get("FerryMQ", {}).get("phases", {})
    if f:
        peak = max(s["VmHWM"] for s in f.values())
        held = f.get("held", {}).get("VmRSS")
        p("")
        p(f"  target (issue 11): FerryMQ broker RSS <= 200 MiB with the pulls held: "
          f"{mib(held)} MiB -> {'met' if held is not None and held <= 200 * 1024 else 'NOT met'}"
          f" (peak VmHWM {mib(peak)} MiB)")
        if "topics" in f and "idle" in f and args.topics:
            nq = args.topics * args.queues
            p(f"  FerryMQ per queue: {(f['topics']['VmRSS'] - f['idle']['VmRSS']) / nq:.2f} KiB configured (topics - idle), "
              f"{(f['messages']['VmRSS'] - f['topics']['VmRSS']) / nq if 'messages' in f else 0:.2f} KiB more with "
              f"its first message (messages - topics); per held pull: "
              f"{(f['held']['VmRSS'] - f['messages']['VmRSS']) / max(1, args.pulls) if 'held' in f else 0:.2f} KiB "
              f"(held - messages)")
    print_problems(p, results)


async def amain(args) -> int:
    kinds = {"ferrymq": [FerryBrokerAlone], "apache": [ApacheBrokerMem]}.get(args.only,
                                                                            [FerryBrokerAlone, ApacheBrokerMem])
    if ApacheBrokerMem in kinds and not await apache_available("FerryMQ only"):
        kinds = [FerryBrokerAlone]
    info = machine_info()
    load = OutsideLoad(info)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-membench-") as tmp:
        for kind in kinds:
            broker = kind(Path(tmp)) if kind is FerryBrokerAlone else kind(Path(tmp), "ASYNC_FLUSH")
            results[broker.name] = await bench_broker(broker, args, Path(tmp))
    load.finish()
    print_report(info, results, args)
    print(f"\nmemory benchmark run time: {info['elapsedS']:.0f} s")
    write_json(args.json, info, args, results)
    return 1 if any(r.get("failed") for r in results.values()) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 topics, 2 000 held pulls over 20 connections")
    parser.add_argument("--topics", type=int, default=None, help="topics (default 1000; quick 200)")
    parser.add_argument("--queues", type=int, default=8, help="queues per topic (default 8)")
    parser.add_argument("--pulls", type=int, default=None, help="held pulls (default 10000; quick 2000)")
    parser.add_argument("--connections", type=int, default=None, help="connections the pulls use (default 100; quick 20)")
    parser.add_argument("--timeout", type=float, default=300, help="bound of each phase, seconds (default 300)")
    parser.add_argument("--only", choices=("ferrymq", "apache"), default=None, help="one broker only")
    parser.add_argument("--json", default=None, help="also write the raw results to this file")
    args = parser.parse_args()
    args.topics = args.topics if args.topics is not None else (200 if args.quick else 1000)
    args.pulls = args.pulls if args.pulls is not None else (2000 if args.quick else 10000)
    args.connections = args.connections if args.connections is not None else (20 if args.quick else 100)
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
