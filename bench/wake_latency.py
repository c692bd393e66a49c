"""Long-poll wake latency: a held pull woken by a message, FerryMQ against Apache RocketMQ 4.9.7.

Not a test. Run: .venv/bin/python bench/wake_latency.py [--quick] [--wakes 2000] [--only ferrymq|apache]
                 [--json FILE]

Issue 11's row "long-poll wake, store -> consumer" (target p50 <= 1 ms, p99 <= 5 ms). For each
broker (FerryMQ ``standalone`` with its /metrics endpoint; Apache RocketMQ 4.9.7 name server +
broker from the compat harness, broker JVM as in bench/broker_bench.py; both ASYNC_FLUSH on
127.0.0.1), on a topic of 8 queues, one message at a time on queue 0, ``--wakes`` times after
``--warmup`` unmeasured rounds:

1. a PULL_MESSAGE with the SUSPEND flag (30 s suspend) at the queue's max offset is sent on one
   raw remoting connection; the broker finds nothing and holds it;
2. after ``--hold-ms`` (so the pull is held when the message comes), a 1 KiB SEND_MESSAGE_V2 to
   queue 0 goes out on a second connection; the held pull is answered with the message.

Figures:

* ``client e2e``: from the send request issued to the pull's response received, in this
  process: both brokers, and the ratio. It includes the send's trip to the broker and the store.
  ``send`` (the send's own round trip) is printed beside it for reference.
* ``broker-side`` (FerryMQ only; Apache exports no such figure): the histogram
  ``ferrymq_broker_pull_wake_latency_seconds`` read from /metrics before and after the measured
  rounds: from the arrival announced right after the append to the held pull's response handed
  to the socket. p50/p99 are interpolated within the histogram's buckets.

Each broker is measured twice on the same connections: with this process (the client) at the
default scheduling policy, then at SCHED_BATCH (``PHASES``). On one small host a socket write
wakes its reader on the writer's core; a client at the default policy then preempts the broker
and its own work is counted in the broker-side figure. The second run is what the broker adds
for a consumer on another machine; bench/targets.py judges the target on it and shows both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from ferrymq.client.admin import AdminClient  # noqa: E402
from ferrymq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from ferrymq.remoting.command import RemotingCommand  # noqa: E402
from ferrymq.remoting.connection import Connection, open_connection  # noqa: E402
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag, SendMessageHeader  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from broker_bench import (ApacheBroker, FerryBroker, OutsideLoad, apache_available, log,  # noqa: E402
                          machine_info, outside_load_line, percentile, print_problems, write_json)

TOPIC = "WakeBench"
GROUP = "wake_bench_group"
QUEUES = 8
SUSPEND_MS = 30_000
BODY = b"w" * 1024
METRIC = "ferrymq_broker_pull_wake_latency_seconds"


class FerryWithMetrics(FerryBroker):
    """``ferrymq standalone`` as bench/broker_bench.py runs it, plus its /metrics endpoint."""

    def __init__(self, workdir: Path, flush: str = "ASYNC_FLUSH") -> None:
        super().__init__(workdir, flush)
        self.proc.http_port = free_port()

    @property
    def broker_addr(self) -> str:
        return self.proc.broker_addr

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.proc.http_port}/metrics", timeout=10) as r:
            return r.read().decode()


class ApacheWithAddr(ApacheBroker):
    @property
    def broker_addr(self) -> str:
        return self.mq.broker_addr


def wake_histogram(text: str) -> dict[str, float]:
    """The wake-latency histogram's cumulative bucket counts by upper bound (``le``), plus _sum/_count."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != METRIC:
            continue
        for s in family.samples:
            if s.name.endswith("_bucket"):
                out[s.labels["le"]] = s.value
            elif s.name.endswith("_sum"):
                out["sum"] = s.value
            elif s.name.endswith("_count"):
                out["count"] = s.value
    return out


def histogram_quantile(delta: dict[str, float], q: float) -> float | None:
    """Prometheus-style: linear interpolation within the bucket that holds the q-th observation."""
    bounds = sorted((float(k), v) for k, v in delta.items() if k not in ("sum", "count"))
    total = delta.get("count", 0)
    if not total or not bounds:
        return None
    rank = q * total
    lo, below = 0.0, 0.0
    for le, cum in bounds:
        if cum >= rank:
            if math.isinf(le):
                return lo  # beyond the last finite bound: say at least that
            return lo + (le - lo) * ((rank - below) / (cum - below) if cum > below else 1.0)
        lo, below = le, cum
    return None


async def connect(addr: str) -> Connection:
    host, _, port = addr.rpartition(":")
    return await open_connection(host, int(port))


def pull_request(offset: int) -> RemotingCommand:
    header = PullMessageHeader(GROUP, TOPIC, 0, offset, 32, PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION, 0,
                               SUSPEND_MS, subscription="*", expression_type="TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields())


def send_request() -> RemotingCommand:
    header = SendMessageHeader("wake_bench_producer", TOPIC, queue_id=0, born_timestamp=int(time.time() * 1000),
                               default_topic_queue_nums=QUEUES)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(v2=True), body=BODY)


async def rounds(pull_conn: Connection, send_conn: Connection, offset: int, n: int, hold_s: float) -> dict:
    """``n`` wakes from ``offset`` on; latencies in ns."""
    e2e: list[int] = []
    send: list[int] = []
    early = errors = 0
    first_error = None
    for _ in range(n):
        pull = pull_conn.invoke_async(pull_request(offset), SUSPEND_MS / 1000 + 10)
        await asyncio.sleep(hold_s)
        if pull.done():
            early += 1  # answered before any message: not a wake (should not happen)
        t0 = time.perf_counter_ns()
        sent = await send_conn.invoke(send_request(), 10)
        t_send = time.perf_counter_ns()
        resp = await asyncio.wait_for(pull, 15)
        t1 = time.perf_counter_ns()
        if sent.code != ResponseCode.SUCCESS or resp.code != ResponseCode.SUCCESS:
            errors += 1
            first_error = first_error or f"send {sent.code} {sent.remark} / pull {resp.code} {resp.remark}"
            if sent.code == ResponseCode.SUCCESS and resp.code != ResponseCode.SUCCESS:
                offset += 1  # the message is there; do not let the next pull find it at once
            await asyncio.sleep(0.05)
            continue
        e2e.append(t1 - t0)
        send.append(t_send - t0)
        offset = int(resp.ext_fields.get("nextBeginOffset", offset + 1))
    return {"e2e": e2e, "send": send, "early": early, "errors": errors, "firstError": first_error, "offset": offset}


def summary(ns: list[int]) -> dict:
    ms = sorted(x / 1e6 for x in ns)
    return {"n": len(ms), "p50Ms": percentile(ms, 0.5), "p90Ms": percentile(ms, 0.9), "p99Ms": percentile(ms, 0.99),
            "maxMs": ms[-1] if ms else None, "meanMs": sum(ms) / len(ms) if ms else None}


async def bench_broker(broker, args) -> dict:
    out: dict = {}
    log(f"{broker.name}: starting")
    try:
        broker.start()
    except Exception as e:  # noqa: BLE001 - report it, go on with the other broker
        log(f"{broker.name} did not start: {type(e).__name__}: {e}")
        return {"failed": f"did not start: {e}"}
    conns: list[Connection] = []
    try:
        async with AdminClient(namesrv_addr=broker.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES, broker_addr=broker.broker_addr)
        conns = [await connect(broker.broker_addr), await connect(broker.broker_addr)]
        pull_conn, send_conn = conns
        # the queue's max offset: a plain pull from 0 says it
        first = await pull_conn.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, PullMessageHeader(
            GROUP, TOPIC, 0, 0, 1, PullSysFlag.SUBSCRIPTION, 0, 0, subscription="*").to_fields()), 10)
        offset = int(first.ext_fields.get("maxOffset", 0))
        log(f"  warm-up: {args.warmup} wakes")
        warm = await rounds(pull_conn, send_conn, offset, args.warmup, args.hold_ms / 1000)
        offset = warm["offset"]
        for phase, policy in PHASES:
            log(f"  measuring: {args.wakes} wakes, load generator {phase}")
            with scheduling_policy(policy):
                figures, offset = await measure(broker, pull_conn, send_conn, offset, args)
            if policy is None:
                out.update(figures)
            else:
                out["isolated"] = figures
            log(f"  {broker.name} ({phase}): e2e {figures['e2e']}, "
                f"broker-side {figures.get('brokerSide', {}).get('p50Ms')}")
    except Exception as e:  # noqa: BLE001 - keep what was measured
        log(f"{broker.name} FAILED: {type(e).__name__}: {e}")
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        await asyncio.gather(*(c.close(0.5) for c in conns), return_exceptions=True)
        out["problems"] = broker.problems()
        broker.stop()
    return out


async def measure(broker, pull_conn: Connection, send_conn: Connection, offset: int, args) -> tuple[dict, int]:
    """One measured run of ``args.wakes`` wakes: its figures, and the queue offset it ends at."""
    out: dict = {}
    before = wake_histogram(broker.metrics_text()) if isinstance(broker, FerryWithMetrics) else None
    cpu0 = broker_cpu(broker.pid)
    t0 = time.monotonic()
    res = await rounds(pull_conn, send_conn, offset, args.wakes, args.hold_ms / 1000)
    out["elapsedS"] = round(time.monotonic() - t0, 1)
    out["brokerCpuS"] = broker_cpu(broker.pid) - cpu0
    out["e2e"] = summary(res["e2e"])
    out["send"] = summary(res["send"])
    out.update(early=res["early"], errors=res["errors"], firstError=res["firstError"])
    if before is not None:
        await asyncio.sleep(0.2)  # the last observation runs right after the last response's write
        after = wake_histogram(broker.metrics_text())
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        out["brokerSide"] = {"n": delta.get("count", 0),
                             "meanMs": 1000 * delta["sum"] / delta["count"] if delta.get("count") else None,
                             "p50Ms": _ms(histogram_quantile(delta, 0.5)),
                             "p99Ms": _ms(histogram_quantile(delta, 0.99)),
                             "buckets": delta}
    return out, res["offset"]


# Each broker is measured twice. "normal": this process (the client) at the default policy, as
# before. "batch": this process at SCHED_BATCH, which keeps it from preempting the broker when the
# broker's socket write wakes it. On one small host the kernel wakes a socket reader on the
# writer's core, expecting the writer to sleep; the broker does not, and a preempting client's
# work then lands inside the broker-side figure (measured: +0.4-0.7 ms on the p50 of 2 cores).
# The batch phase is what the broker adds for a consumer on another machine.
PHASES = (("normal", None), ("batch", "batch"))


@contextlib.contextmanager
def scheduling_policy(policy: str | None):
    """This thread (the bench's event loop) at SCHED_BATCH for the block; brokers already run."""
    if policy is None:
        yield
        return
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def phase_figures(result: dict) -> list[tuple[str, dict]]:
    """(phase, figures) of one broker's result: the normal run at the top level, the batch one under "isolated"."""
    out = [(PHASES[0][0], result)] if "e2e" in result else []
    if "e2e" in result.get("isolated", {}):
        out.append((PHASES[1][0], result["isolated"]))
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def broker_cpu(pid: int | None) -> float:
    from broker_bench import proc_cpu_seconds
    return proc_cpu_seconds(pid)


def _f(v, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def print_report(info: dict, results: dict, args, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("")
    p("FerryMQ long-poll wake latency benchmark")
    p(f"date {info['date']}   cpu {info['cpu']}   nproc {info['nproc']}   memory {info['memory_gib']} GiB   "
      f"kernel {info['kernel']}")
    p(f"python {info['python']}   java: {info['java']}   ferrymq {info['ferrymq_commit']}")
    p(f"{args.wakes} wakes after {args.warmup} warm-up, one at a time: a held pull (SUSPEND) on queue 0, then after "
      f"{args.hold_ms:g} ms one 1 KiB send to it; FerryMQ standalone / Apache 4.9.7 broker, ASYNC_FLUSH, 127.0.0.1")
    p(outside_load_line(info))
    p("")
    p("== client e2e: send issued -> held pull's response received (ms); send = the send's own round trip ==")
    p("   load generator 'normal': this client at the default scheduling policy; 'batch': at SCHED_BATCH, so a")
    p("   response's wake-up does not preempt the broker on its own core (what a consumer elsewhere sees)")
    p(f"  {'broker':<9} {'client':<7} {'wakes':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'mean':>7}   "
      f"{'send p50':>8} {'send p99':>8}  {'errors':>6} {'early':>5} {'CPU us/wake':>11}")
    for name, r in results.items():
        if "e2e" not in r:
            p(f"  {name:<9} FAILED: {r.get('failed')}")
            continue
        for phase, figures in phase_figures(r):
            e, s = figures["e2e"], figures["send"]
            cpu = 1e6 * figures["brokerCpuS"] / e["n"] if e["n"] else None
            p(f"  {name:<9} {phase:<7} {e['n']:>6} {_f(e['p50Ms']):>7} {_f(e['p90Ms']):>7} {_f(e['p99Ms']):>7} "
              f"{_f(e['maxMs'], '.1f'):>7} {_f(e['meanMs']):>7}   {_f(s['p50Ms']):>8} {_f(s['p99Ms']):>8}  "
              f"{figures['errors']:>6} {figures['early']:>5} {_f(cpu, '.0f'):>11}")
            if figures.get("firstError"):
                p(f"  {'':<17} first error: {figures['firstError']}")
    for phase in (name for name, _ in PHASES):
        f, a = (dict(phase_figures(results.get(b, {}))).get(phase, {}).get("e2e") for b in ("FerryMQ", "Apache"))
        if f and a and a.get("p50Ms") and a.get("p99Ms"):
            p(f"  {'F/A':<9} {phase:<7} {'':>6} {f['p50Ms'] / a['p50Ms']:>6.2f}x {'':>7} {f['p99Ms'] / a['p99Ms']:>6.2f}x"
              "   (latency ratio: > 1 means FerryMQ is slower)")
    for phase, figures in phase_figures(results.get("FerryMQ", {})):
        bs = figures.get("brokerSide")
        if not bs:
            continue
        p("")
        p(f"== FerryMQ broker-side, load generator {phase}: {METRIC} (store -> held pull's response written) ==")
        p(f"  observations {bs['n']:.0f}   p50 {_f(bs['p50Ms'], '.3f')} ms   p99 {_f(bs['p99Ms'], '.3f')} ms   "
          f"mean {_f(bs['meanMs'], '.3f')} ms   (p50/p99 interpolated within buckets)")
        cum = sorted(((float(k), v) for k, v in bs["buckets"].items() if k not in ("sum", "count")))
        p("  cumulative: " + "  ".join(f"<={le * 1000:g}ms:{v:.0f}" for le, v in cum if not math.isinf(le)))
        ok50 = bs["p50Ms"] is not None and bs["p50Ms"] <= 1.0
        ok99 = bs["p99Ms"] is not None and bs["p99Ms"] <= 5.0
        p(f"  target (issue 11): p50 <= 1 ms {'met' if ok50 else 'NOT met'}, p99 <= 5 ms {'met' if ok99 else 'NOT met'}")
    print_problems(p, results)


async def amain(args) -> int:
    kinds = {"ferrymq": [FerryWithMetrics], "apache": [ApacheWithAddr]}.get(args.only, [FerryWithMetrics, ApacheWithAddr])
    if ApacheWithAddr in kinds and not await apache_available("FerryMQ only"):
        kinds = [FerryWithMetrics]
    info = machine_info()
    load = OutsideLoad(info)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-wakebench-") as tmp:
        for kind in kinds:
            broker = kind(Path(tmp), "ASYNC_FLUSH")
            results[broker.name] = await bench_broker(broker, args)
    load.finish()
    print_report(info, results, args)
    print(f"\nwake latency benchmark run time: {info['elapsedS']:.0f} s")
    write_json(args.json, info, args, results)
    return 1 if any(r.get("failed") for r in results.values()) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 wakes after 100 warm-up")
    parser.add_argument("--wakes", type=int, default=None, help="measured wakes (default 2000; quick 300)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured wakes first (default 500; quick 100)")
    parser.add_argument("--hold-ms", type=float, default=5.0, help="pause between the pull and the send (default 5)")
    parser.add_argument("--only", choices=("ferrymq", "apache"), default=None, help="one broker only")
    parser.add_argument("--json", default=None, help="also write the raw results to this file")
    args = parser.parse_args()
    args.wakes = args.wakes if args.wakes is not None else (300 if args.quick else 2000)
    args.warmup = args.warmup if args.warmup is not None else (100 if args.quick else 500)
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
