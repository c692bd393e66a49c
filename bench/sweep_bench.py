"""The sweep of issue 33: FerryMQ against Apache RocketMQ 5.3.1 and 4.9.7 over many load shapes.

Not a test. Run: .venv/bin/python bench/sweep_bench.py [--quick] [--points a,b,...]
[--only ferrymq|apache5|apache4] [--rounds N] [--json PATH]   (``make bench-sweep``,
``make bench-sweep-quick``)

Design: one axis varied at a time around a base point (1 KiB bodies, 64 concurrent sync senders,
ASYNC_FLUSH), not the cross product (which would take a day on 2 cores):

* ``base``                              1 KiB, 64 senders;
* ``size128``, ``size4k``, ``size16k``  the base with other body sizes;
* ``senders1``, ``senders16``, ``senders256``  the base with other sender counts;
* ``batch8``, ``batch32``, ``batch128`` batches of K 1 KiB messages, 4 batches in flight;
* ``pull``, ``litepull``, ``push``, ``pushorderly``  a consumer of each kind draining 1 KiB
  messages from a topic of their own, which ``--messages`` batch sends fill just before, each in a
  new consumer group from the first offset: one puller per queue (BenchLoad's pull, which drains
  the whole topic, as in broker_bench), then DefaultLitePullConsumer, DefaultMQPushConsumer
  concurrently and orderly (each the first ``--messages`` of the topic);
* ``syncflush``                         the base with both brokers on SYNC_FLUSH.

The batch and drain points move 4 times ``--messages`` (fill and drain alike): at 30-130k msgs/s
50 000 messages last 0.4-1.5 s, and one slow round trip or pause would move such a figure.

The load is the same for every broker: ``ferrymq.compat.BenchLoad``, the official RocketMQ 4.9.7
Java client, in a JVM of its own per point (the 4.9.7 client speaks to 5.3.1 brokers too).
Brokers: FerryMQ ``standalone``; Apache 5.3.1 and 4.9.7 brokers under the harness's 4.9.7 name
server, broker_bench's 1 GiB G1 JVM and 1 GiB commit-log files; all on 127.0.0.1, topics of 8
queues. Only one broker runs at a time. A round starts each broker fresh (an empty store), warms
it up (broker_bench's unmeasured sends and pulls), runs every point of its flush mode in order
and stops it; the brokers take turns going first from one round to the next, so a drift of the
machine hits them alike. Fresh per round rather than per point: a JVM broker's start and warm-up
cost about 25 s, which per point would double the run. Each point's figure is the median of its
rounds (3; ``--quick`` 1): msgs/s, and broker CPU (utime+stime from /proc over the measurement)
per message. The ratio is FerryMQ's msgs/s over the faster Apache's; the last line names the
worst point. A drain's rate runs from its first message received to the last.

Every round's figures, the machine (CPUs, load, steal) and the commit go to
bench/results/sweep-<date>-<time>.json (``--quick``: sweep-quick-...; not to be committed).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from broker_bench import BOUNDS as BROKER_BENCH_BOUNDS  # noqa: E402
from broker_bench import (WARMUP_TOPIC, ApacheBroker, FerryBroker, OutsideLoad, add_bound_arguments,  # noqa: E402
                          apache_available, java_load, log, machine_info, outside_load_line, parse_bounded_args,
                          prepare_topics, warm_up_broker)

RESULTS_DIR = REPO / "bench" / "results"
SEND_TOPIC = "SweepSend"
DRAIN_TOPIC = "SweepDrain"  # the consumer points' own topic, filled by each just before its drain
KIB = 1024
# (full run, --quick): a quick point is 3 s, a quick broker warm-up half broker_bench's
BOUNDS = {"rounds": (3, 1), **BROKER_BENCH_BOUNDS, "seconds": (15.0, 3.0), "broker_warmup": (20000, 5000)}


@dataclass(frozen=True)
class Point:
    name: str
    scenario: str  # BenchLoad's scenario measured
    size: int = KIB
    flush: str = "ASYNC_FLUSH"
    fill: str | None = None  # BenchLoad's scenario run first, not measured (a drain's messages)
    scale: int = 1  # the point moves scale x --messages (FAST_POINT_SCALE: see the module's docstring)

    @property
    def topic(self) -> str:
        return DRAIN_TOPIC if self.fill else SEND_TOPIC

    def describe(self) -> str:
        what = {"pull": "pull, 1 puller per queue", "litepull": "lite pull", "push": "push concurrently",
                "pushorderly": "push orderly"}.get(self.scenario)
        if what is None and self.scenario.startswith("batch"):
            k, t = self.scenario[5:].split("x")
            what = f"batches of {k}, {t} in flight"
        if what is None:
            what = f"{self.scenario[4:]} senders"
        return f"{what}, {self.size // KIB} KiB" if self.size >= KIB else f"{what}, {self.size} B"


BATCHES_IN_FLIGHT = 4
FAST_POINT_SCALE = 4  # the batch and drain points' scale (still bounded by --seconds)
DRAIN_FILL = f"batch32x{BATCHES_IN_FLIGHT}"
POINTS = {p.name: p for p in [
    Point("base", "sync64"),
    Point("size128", "sync64", size=128),
    Point("size4k", "sync64", size=4 * KIB),
    Point("size16k", "sync64", size=16 * KIB),
    Point("senders1", "sync1"),
    Point("senders16", "sync16"),
    Point("senders256", "sync256"),
    *(Point(f"batch{k}", f"batch{k}x{BATCHES_IN_FLIGHT}", scale=FAST_POINT_SCALE) for k in (8, 32, 128)),
    *(Point(c, c, fill=DRAIN_FILL, scale=FAST_POINT_SCALE) for c in ("pull", "litepull", "push", "pushorderly")),
    Point("syncflush", "sync64", flush="SYNC_FLUSH"),
]}
QUICK_POINTS = ("base", "size16k", "batch32", "push")
BROKERS = {"ferrymq": "FerryMQ", "apache5": "Apache 5.3.1", "apache4": "Apache 4.9.7"}


def make_broker(key: str, workdir: Path, flush: str):
    from testkit.java_client import ROCKETMQ5_VERSION, ROCKETMQ_VERSION

    if key == "ferrymq":
        return FerryBroker(workdir, flush)
    version = ROCKETMQ5_VERSION if key == "apache5" else ROCKETMQ_VERSION
    return ApacheBroker(workdir, flush, version=version, name=BROKERS[key])


# ---------------------------------------------------------------------------------------------
# Measuring


async def measure_point(broker, point: Point, args) -> dict:
    """One BenchLoad run of ``point`` on a started broker: its measured scenario's result."""
    scenarios = [point.fill, point.scenario] if point.fill else [point.scenario]
    results = await asyncio.to_thread(java_load, broker.namesrv_addr, point.topic, scenarios,
                                      args.messages * point.scale, args.seconds, args.warmup, point.size, broker.pid)
    return results.get(point.scenario) or {"failed": "the load generator gave no result (its log is above)"}


def cpu_us_per_msg(result: dict) -> float | None:
    cpu, n = result.get("brokerCpuS"), result.get("messages")
    return 1e6 * cpu / n if cpu is not None and n else None


async def run_broker(key: str, points: list[Point], args, workdir: Path, label: str) -> dict[str, dict]:
    """Start broker ``key`` fresh, warm it up, measure ``points`` in turn, stop it."""
    broker = make_broker(key, workdir, points[0].flush)
    t0 = time.monotonic()
    log(f"{label} {broker.name} ({points[0].flush}): starting")
    try:
        broker.start()
    except Exception as e:  # noqa: BLE001 - the other brokers still run
        log(f"{label} {broker.name} did not start: {type(e).__name__}: {e}")
        return {p.name: {"failed": f"broker did not start: {e}"} for p in points}
    out: dict[str, dict] = {}
    try:
        await prepare_topics(broker, [WARMUP_TOPIC, SEND_TOPIC, DRAIN_TOPIC])
        await warm_up_broker(broker, args.broker_warmup, args.seconds, KIB)
        for point in points:
            try:
                out[point.name] = r = await measure_point(broker, point, args)
            except Exception as e:  # noqa: BLE001 - one failing point must not lose the rest
                out[point.name] = r = {"failed": f"{type(e).__name__}: {e}"}
            cpu = cpu_us_per_msg(r)
            log(f"{label} {broker.name} {point.name}: "
                + (f"FAILED {r['failed'][:100]}" if "failed" in r else
                   f"{r['msgsPerSec']:,.0f} msgs/s, broker {cpu or 0:.0f} us/msg, {r.get('errors', 0)} errors")
                + f"   ({time.monotonic() - t0:.0f} s)")
    except Exception as e:  # noqa: BLE001 - reported on the points not measured
        log(f"{label} {broker.name} FAILED: {type(e).__name__}: {e}")
        out.update({p.name: {"failed": f"{type(e).__name__}: {e}"} for p in points if p.name not in out})
    finally:
        problems = broker.problems()
        broker.stop()
    if problems:
        log(f"{label} {broker.name}: {len(problems)} warning/error lines in its log, first: {problems[0][:160]}")
    return out


async def run_rounds(points: list[Point], brokers: list[str], args, workdir: Path) -> list[dict]:
    """Every round's results: {broker key: {point name: BenchLoad result}}."""
    flushes = list(dict.fromkeys(p.flush for p in points))
    rounds: list[dict] = []
    for n in range(args.rounds):
        order = brokers[n % len(brokers):] + brokers[:n % len(brokers)]  # each goes first in turn
        found: dict[str, dict] = {key: {} for key in brokers}
        for flush in flushes:
            for key in order:
                run_dir = workdir / f"round{n + 1}-{key}-{flush}"
                run_dir.mkdir()
                found[key].update(await run_broker(key, [p for p in points if p.flush == flush], args, run_dir,
                                                   f"[round {n + 1}/{args.rounds}]"))
        rounds.append(found)
    return rounds


# ---------------------------------------------------------------------------------------------
# Reporting


def median_of(rounds: list[dict], key: str, point: str, figure) -> float | None:
    """The median of ``figure(result)`` over the rounds in which broker ``key`` measured ``point``."""
    values = []
    for found in rounds:
        result = found.get(key, {}).get(point)
        if result and "failed" not in result and (value := figure(result)) is not None:
            values.append(value)
    return statistics.median(values) if values else None


def summarize(rounds: list[dict], points: list[Point], brokers: list[str]) -> list[dict]:
    """Per point: each broker's median msgs/s and CPU per message, and FerryMQ / the faster Apache."""
    rows = []
    for point in points:
        row: dict = {"point": point.name, "shape": point.describe(), "flush": point.flush}
        for key in brokers:
            row[key] = {"msgsPerSec": median_of(rounds, key, point.name, lambda r: r.get("msgsPerSec")),
                        "cpuUsPerMsg": median_of(rounds, key, point.name, cpu_us_per_msg)}
        apache = [k for k in brokers if k != "ferrymq" and row[k]["msgsPerSec"]]
        faster = max(apache, key=lambda k: row[k]["msgsPerSec"], default=None)
        ferry = row.get("ferrymq", {}).get("msgsPerSec")
        row["fasterApache"] = faster
        row["ratio"] = ferry / row[faster]["msgsPerSec"] if faster and ferry is not None else None
        rows.append(row)
    return rows


def _fmt(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def print_table(info: dict, rows: list[dict], brokers: list[str], args) -> None:
    print("")
    print(f"FerryMQ sweep against Apache RocketMQ: median of {args.rounds} round(s), load = the official "
          f"4.9.7 Java client (BenchLoad), {args.messages} messages ({FAST_POINT_SCALE}x at batch and drain points) "
          f"or {args.seconds:g} s per point")
    print(f"date {info['date']}   cpu {info['cpu']}   nproc {info['nproc']}   ferrymq {info['ferrymq_commit']}   "
          f"python {info['python']} ({info['python_interpreter']}), loop {info['python_loop_s']} s")
    print(outside_load_line(info))
    names = [BROKERS[k] for k in brokers]
    header = (f"{'point':<12} {'shape':<36} " + " ".join(f"{n + ' msgs/s':>20}" for n in names)
              + f" {'F / faster A':>12} " + " ".join(f"{n + ' us/msg':>20}" for n in names))
    print(header)
    for row in rows:
        shape = row["shape"] + (", SYNC_FLUSH" if row["flush"] == "SYNC_FLUSH" else "")
        print(f"{row['point']:<12} {shape:<36} "
              + " ".join(f"{_fmt(row[k]['msgsPerSec'], ',.0f'):>20}" for k in brokers)
              + f" {_fmt(row['ratio'], '.2f') + 'x':>12} "
              + " ".join(f"{_fmt(row[k]['cpuUsPerMsg'], '.1f'):>20}" for k in brokers))
    judged = [r for r in rows if r["ratio"] is not None]
    if judged:
        worst = min(judged, key=lambda r: r["ratio"])
        print(f"worst point: {worst['point']} ({worst['shape']}, {worst['flush']}): FerryMQ at {worst['ratio']:.2f}x "
              f"{BROKERS[worst['fasterApache']]}; minimum ratio over the sweep {worst['ratio']:.2f}x")
    else:
        print("worst point: none (no point has both FerryMQ's and an Apache broker's figure)")


def results_path(args) -> Path:
    if args.json:
        return Path(args.json)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d-%H%M")
    return RESULTS_DIR / f"sweep{'-quick' if args.quick else ''}-{stamp}.json"


def select_points(args) -> list[Point]:
    names = args.points.split(",") if args.points else (QUICK_POINTS if args.quick else POINTS)
    unknown = [n for n in names if n not in POINTS]
    if unknown:
        raise SystemExit(f"unknown points {','.join(unknown)}: choose from {','.join(POINTS)}")
    return [POINTS[n] for n in names]


async def amain(args) -> int:
    points = select_points(args)
    brokers = [args.only] if args.only else list(BROKERS)
    if not await apache_available("the sweep's load generator is the 4.9.7 Java client"):
        return 1
    info = machine_info()
    load = OutsideLoad(info)
    log(f"sweep: {len(points)} points x {args.rounds} round(s) on {', '.join(BROKERS[k] for k in brokers)}")
    with tempfile.TemporaryDirectory(prefix="ferrymq-sweep-") as tmp:
        rounds = await run_rounds(points, brokers, args, Path(tmp))
    load.finish()
    rows = summarize(rounds, points, brokers)
    print_table(info, rows, brokers, args)
    path = results_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": info, "args": vars(args), "points": {p.name: p.describe() for p in points},
                                "medians": rows, "rounds": rounds}, indent=2))
    print(f"sweep run time {info['elapsedS']:.0f} s; every round written to {path}")
    failed = any("failed" in res for r in rounds for b in r.values() for res in b.values())
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"points {','.join(QUICK_POINTS)}, one round, small counts (a few minutes)")
    parser.add_argument("--points", default=None, help=f"comma-separated, of {','.join(POINTS)} (default all)")
    parser.add_argument("--only", choices=tuple(BROKERS), default=None, help="one broker only")
    add_bound_arguments(parser, BOUNDS, "point")
    parser.add_argument("--json", default=None, help="results file (default bench/results/sweep-<date>-<time>.json)")
    sys.exit(asyncio.run(amain(parse_bounded_args(parser, BOUNDS))))


if __name__ == "__main__":
    main()
