"""Timer messages (docs/timers.md): FerryMQ standalone against Apache RocketMQ 5.3.1, same run.

Not a test. Run: .venv/bin/python bench/timer_bench.py [--quick] [--only ferrymq|apache] [--json PATH]

Issue 31's acceptance rows, each measured on both brokers in turn (FerryMQ ``standalone`` as a
subprocess; Apache's 5.3.1 broker under the harness's 4.9.7 name server, with broker_bench's
1 GiB G1 JVM and 1 GiB commit-log files; both on their defaults otherwise: timerWheelEnable,
timerPrecisionMs 1000, timerMaxDelaySec 3 days; ASYNC_FLUSH; 127.0.0.1):

1. lateness under load: ordinary 1 KiB async sends paced at ``--rate`` (default 10 000/s) for
   ``--load-seconds``, while ``--timers`` timers due 2-20 s after their send are scheduled; a push
   consumer records receive time minus due time per timer (p50/p99/max, early deliveries);
2. schedule and fire: ``--fire-timers`` timers (200 000; quick 20 000) sent as fast as the client
   allows (512 async sends in flight), all due at one moment after the last is acknowledged;
   schedule rate = acknowledgements/s, fire rate = deliveries/s from the due time to the last;
3. pending RSS: ``--pending-timers`` timers (1 000 000; quick 100 000) due hours ahead, sent to a
   broker started fresh for this row; the broker process's VmRSS before and after (settled),
   FerryMQ's target < 300 MiB.

The load generator is ``ferrymq.compat53.TimerBench``, Apache's 5.3.1 remoting client
(``DefaultMQProducer.setDeliverTimeMs``, ``DefaultMQPushConsumer``) in its own JVM, one per row
and broker: FerryMQ's Python client shares the 2 cores with the broker and cannot reach 10 000
sends/s beside it; the Java client is the same load for both brokers. Every timer carries its due
time as a user property; lateness is measured in the consumer, so it includes the push
consumer's pull round trip (the same for both brokers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from broker_bench import (LOADGEN_JVM, ApacheBroker, FerryBroker, OutsideLoad, apache_available, log,  # noqa: E402
                          machine_info, outside_load_line, wait_for_route)
from memory_bench import settled_status  # noqa: E402

RESULTS_DIR = REPO / "bench" / "results"
RSS_TARGET_MIB = 300.0
LATE_P99_TARGET_MS = 1000.0
PENDING_DUE_MS = 3 * 3600 * 1000  # pending timers: three hours ahead (spread over the hour after)


async def java53_available() -> bool:
    """Whether the 5.3.1 client and broker jars are there (fetched once), TimerBench compiled."""
    from testkit.java_client import ROCKETMQ5_VERSION, CompatUnavailable, ensure_compat_classes

    try:
        await asyncio.to_thread(ensure_compat_classes, ROCKETMQ5_VERSION)
        return True
    except CompatUnavailable as e:
        log(f"Apache RocketMQ 5.3.1 jars unavailable ({e.reason}): FerryMQ only")
        return False


def timer_bench(namesrv: str, args: list[str], timeout: float) -> dict:
    """Run one ``ferrymq.compat53.TimerBench``; its result event (or ``{"error": why}``)."""
    from testkit.java_client import ROCKETMQ5_VERSION, java_client_command

    cmd = java_client_command(["--namesrv", namesrv, *map(str, args)], main="ferrymq.compat53.TimerBench",
                              jvm_args=LOADGEN_JVM, version=ROCKETMQ5_VERSION)
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"load generator timed out after {timeout:.0f} s"}
    result, error = None, None
    for line in proc.stdout.splitlines():
        if line.strip().startswith("{"):
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "result":
                    result = event
                elif event.get("event") == "error":
                    error = event.get("error")
    if result is None:
        return {"error": error or f"exit {proc.returncode}: {proc.stderr[-500:]}"}
    return result


async def bench_broker(broker, a, run_id: str, rows_wanted: list[str]) -> dict:
    out: dict = {}
    t0 = time.monotonic()
    broker.start()
    log(f"{broker.name}: started in {time.monotonic() - t0:.1f} s, pid {broker.pid}")
    try:
        load_topic = f"TimerLoad{run_id}"
        await broker.create_topic(load_topic)
        await wait_for_route(broker.namesrv_addr, load_topic)
        rows = []
        if "lateness" in rows_wanted:
            rows.append(("lateness", [
                "--mode", "lateness", "--topic", f"TimerLate{run_id}", "--load-topic", load_topic,
                "--rate", a.rate, "--load-seconds", a.load_seconds, "--timers", a.timers,
                "--min-delay-ms", a.min_delay_ms, "--max-delay-ms", a.max_delay_ms, "--timeout-ms", 60000],
                a.load_seconds + 180))
        if "fire" in rows_wanted:
            # due after the last acknowledgement: the fire phase starts once all are scheduled
            due_in = int(a.fire_timers / a.expect_schedule_rate * 1000) + 5000
            rows.append(("fire", ["--mode", "throughput", "--topic", f"TimerFire{run_id}",
                                  "--timers", a.fire_timers, "--due-in-ms", due_in, "--timeout-ms", 180000],
                         due_in / 1000 + 300))
        if "pending" in rows_wanted:
            rows.append(("pending", ["--mode", "pending", "--topic", f"TimerPending{run_id}",
                                     "--timers", a.pending_timers, "--due-in-ms", PENDING_DUE_MS],
                         a.pending_timers / 1000 + 300))
        for name, args, timeout in rows:
            before = await settled_status(broker.pid) if name == "pending" else None
            log(f"{broker.name}: {name} ...")
            t1 = time.monotonic()
            r = await asyncio.to_thread(timer_bench, broker.namesrv_addr, args, timeout)
            log(f"{broker.name}: {name} done in {time.monotonic() - t1:.0f} s: "
                f"{json.dumps({k: v for k, v in r.items() if k != 'event'})[:400]}")
            if name == "pending" and "error" not in r:
                after = await settled_status(broker.pid, seconds=2.0, timeout=60.0)
                r["rssBeforeKiB"], r["rssAfterKiB"] = before["VmRSS"], after["VmRSS"]
                r["rssAnonAfterKiB"], r["rssFileAfterKiB"] = after.get("RssAnon"), after.get("RssFile")
                r["hwmAfterKiB"] = after.get("VmHWM")
            out[name] = r
        if problems := broker.problems():
            out["problems"] = problems[:20]
    finally:
        broker.stop()
    return out


# ---------------------------------------------------------------------------------------------
# Report


def _get(results: dict, broker: str, *keys):
    v = results.get(broker) or {}
    for k in keys:
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return v


def _ratio(f, a) -> str:
    return f"{f / a:.2f}x" if isinstance(f, (int, float)) and isinstance(a, (int, float)) and a else "-"


def _cell(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def report_rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    """(row, FerryMQ, Apache, F/A, target) for each figure."""
    rows = []

    def add(label: str, keys: tuple, fmt: str, target: str = "", ratio: bool = True) -> None:
        f, a = _get(results, "FerryMQ", *keys), _get(results, "Apache", *keys)
        rows.append((label, _cell(f, fmt), _cell(a, fmt), _ratio(f, a) if ratio else "", target))

    for b in ("FerryMQ", "Apache"):
        for row in ("lateness", "fire", "pending"):
            if why := _get(results, b, row, "error") or (row == "lateness" and _get(results, b, "error")):
                rows.append((f"{row}: {b} FAILED", str(why)[:100], "", "", ""))
    add("load achieved, sends/s", ("lateness", "loadRate"), ",.0f", "the rate asked (--rate)")
    add("load sends failed", ("lateness", "loadFailed"), "d", ratio=False)
    add("load: busy refusals retried", ("lateness", "loadBusyRetries"), "d", ratio=False)
    reasons = [", ".join(f"{k} {v}" for k, v in sorted((_get(results, b, "lateness", "loadBusyReasons") or {}).items()))
               for b in ("FerryMQ", "Apache")]
    if any(reasons):
        rows.append(("load: busy refusals by the broker's reason", reasons[0] or "-", reasons[1] or "-", "", ""))
    add("timers delivered / scheduled", ("lateness", "received"), "d", ratio=False)
    add("lateness p50, ms", ("lateness", "lateness", "p50Ms"), "d")
    add("lateness p99, ms", ("lateness", "lateness", "p99Ms"), "d", f"F <= {LATE_P99_TARGET_MS:.0f}")
    add("lateness max, ms", ("lateness", "lateness", "maxMs"), "d")
    add("early deliveries", ("lateness", "lateness", "early"), "d", "F = 0", ratio=False)
    add("fired (store time - due) p50, ms", ("lateness", "storedLateness", "p50Ms"), "d")
    add("fired (store time - due) p99, ms", ("lateness", "storedLateness", "p99Ms"), "d")
    add("earliest (min lateness), ms", ("lateness", "lateness", "minMs"), "d", ratio=False)
    add("schedule, timers acked/s", ("fire", "scheduleRate"), ",.0f", "reported")
    add("fire, timers delivered/s", ("fire", "fireRate"), ",.0f", "reported")
    add("fire: delivered", ("fire", "received"), "d", ratio=False)
    lost = []
    for b in ("FerryMQ", "Apache"):
        acked, got = _get(results, b, "fire", "acked"), _get(results, b, "fire", "received")
        lost.append(None if acked is None or got is None else acked - got)
    rows.append(("fire: acked, never delivered", _cell(lost[0], ",d"), _cell(lost[1], ",d"), "", "0"))
    add("fire: sends failed (after busy retries)", ("fire", "failed"), "d", ratio=False)
    add("fire: busy refusals retried", ("fire", "busyRetries"), "d", ratio=False)
    add("fire: last delivery after due, ms", ("fire", "lastReceivedAfterDueMs"), "d")
    add("fire: early deliveries", ("fire", "lateness", "early"), "d", "F = 0", ratio=False)
    add("pending: schedule, timers acked/s", ("pending", "scheduleRate"), ",.0f")
    add("pending: timers acked", ("pending", "acked"), ",d", ratio=False)
    add("pending: sends failed (after busy retries)", ("pending", "failed"), "d", ratio=False)
    for label, key in (("pending: RSS before, MiB", "rssBeforeKiB"), ("pending: RSS after, MiB", "rssAfterKiB")):
        f, a = _get(results, "FerryMQ", "pending", key), _get(results, "Apache", "pending", key)
        rows.append((label, _cell(f and f / 1024, ",.1f"), _cell(a and a / 1024, ",.1f"), _ratio(f, a),
                     f"F < {RSS_TARGET_MIB:.0f}" if key == "rssAfterKiB" else ""))
    return rows


def verdicts(results: dict, a) -> list[str]:
    out = []
    late = _get(results, "FerryMQ", "lateness", "lateness") or {}
    if late.get("p99Ms") is not None:
        ok = late["p99Ms"] <= LATE_P99_TARGET_MS and late.get("early") == 0
        out.append(f"FerryMQ on time (never early, p99 late <= {LATE_P99_TARGET_MS:.0f} ms): "
                   f"{'met' if ok else 'NOT met'} at {_get(results, 'FerryMQ', 'lateness', 'loadRate'):,.0f} sends/s")
    rss = _get(results, "FerryMQ", "pending", "rssAfterKiB")
    if rss is not None:
        n = _get(results, "FerryMQ", "pending", "acked")
        out.append(f"FerryMQ RSS with {n:,} pending timers: {rss / 1024:.1f} MiB, target < {RSS_TARGET_MIB:.0f} MiB "
                   f"{'met' if rss / 1024 < RSS_TARGET_MIB else 'NOT met'}"
                   + ("" if n >= 1_000_000 else " (fewer timers than the target's 1 000 000)"))
    return out


def print_report(info: dict, results: dict, a, file=sys.stdout) -> None:
    p = lambda s="": print(s, file=file)  # noqa: E731
    p()
    p(f"== timer messages: FerryMQ vs Apache RocketMQ 5.3.1, load = official 5.3.1 Java client "
      f"({a.rows_text}) ==")
    p(f"machine: {info.get('nproc')} CPUs, {info.get('python')}; {outside_load_line(info)}")
    p(f"lateness: {a.timers} timers due {a.min_delay_ms / 1000:g}-{a.max_delay_ms / 1000:g} s ahead during "
      f"{a.load_seconds} s of 1 KiB sends paced at {a.rate:,}/s; fire: {a.fire_timers:,} timers due at once; "
      f"pending: {a.pending_timers:,} timers due in 3-4 h")
    rows = [("row", "FerryMQ", "Apache 5.3.1", "F/A", "target"), *report_rows(results)]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        p("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for line in verdicts(results, a):
        p(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (a few minutes)")
    ap.add_argument("--only", choices=("ferrymq", "apache"))
    ap.add_argument("--rows", default="lateness,fire,pending")
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--load-seconds", type=int, default=None, help="default 40 (quick 25)")
    ap.add_argument("--timers", type=int, default=None, help="lateness row's timers (default 4000, quick 1000)")
    ap.add_argument("--min-delay-ms", type=int, default=2000)
    ap.add_argument("--max-delay-ms", type=int, default=20000)
    ap.add_argument("--fire-timers", type=int, default=None, help="default 200000 (quick 20000)")
    ap.add_argument("--pending-timers", type=int, default=None, help="default 1000000 (quick 100000)")
    ap.add_argument("--expect-schedule-rate", type=float, default=1500.0,
                    help="timers/s assumed to place the fire row's due time after the last ack")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--no-record", action="store_true", help="do not write bench/results/timers-<date>.json (a run of both brokers and all rows writes it)")
    a = ap.parse_args()
    a.load_seconds = a.load_seconds or (25 if a.quick else 40)
    a.timers = a.timers or (1000 if a.quick else 4000)
    a.fire_timers = a.fire_timers or (20_000 if a.quick else 200_000)
    a.pending_timers = a.pending_timers or (100_000 if a.quick else 1_000_000)
    if a.quick and a.max_delay_ms == 20000:
        a.max_delay_ms = 12000
    a.rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    a.rows_text = "quick" if a.quick else "full"
    return asyncio.run(amain(a))


async def amain(a) -> int:
    info = machine_info()
    load = OutsideLoad(info)
    results: dict = {}
    run_id = str(int(time.time()))
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as tmp:
        work = Path(tmp)
        makers = []  # each makes a fresh broker in a directory of its own
        if a.only != "apache":
            makers.append(FerryBroker)
        if a.only != "ferrymq":
            if await apache_available("FerryMQ only") and await java53_available():
                from testkit.java_client import ROCKETMQ5_VERSION

                # broker_bench's Apache broker, version 5.3.1: timers need a 5.x broker
                makers.append(lambda d: ApacheBroker(d, version=ROCKETMQ5_VERSION))
        # The pending row gets a broker of its own, started fresh: its RSS is what a million
        # pending timers cost, not what the rows before it left mapped (the lateness and fire
        # rows read ~0.5 GB of CommitLog through the broker's mapping).
        phases = [[r for r in a.rows if r != "pending"], [r for r in a.rows if r == "pending"]]
        for n, make in enumerate(makers):
            for p, rows in enumerate(phases):
                if not rows:
                    continue
                (work / f"{n}-{p}").mkdir()
                broker = make(work / f"{n}-{p}")
                try:
                    out = await bench_broker(broker, a, run_id, rows)
                    mine = results.setdefault(broker.name, {})
                    problems = mine.get("problems", []) + out.pop("problems", [])
                    mine.update(out)
                    if problems:
                        mine["problems"] = problems
                except Exception as e:  # noqa: BLE001 - one broker's failure is reported, the other still runs
                    log(f"{broker.name}: failed: {e!r}")
                    results.setdefault(broker.name, {})["error"] = repr(e)
    load.finish()
    print_report(info, results, a)
    doc = {"machine": info, "args": {k: v for k, v in vars(a).items()}, "results": results,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=2))
        print(f"results written to {a.json}")
    partial = a.only is not None or set(a.rows) != {"lateness", "fire", "pending"}
    if partial and not a.no_record:
        print("a partial run (--only or --rows): not written to bench/results (--json PATH keeps it)")
    elif not a.no_record:
        path = RESULTS_DIR / f"timers-{'quick-' if a.quick else ''}{datetime.date.today().isoformat()}.json"
        path.write_text(json.dumps(doc, indent=2))
        print(f"results written to {path}")
    failed = any("error" in r or any(isinstance(v, dict) and "error" in v for v in r.values())
                 for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
