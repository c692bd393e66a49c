"""Issue 11's target rows, read from the JSON files the benchmarks of one ``make bench`` run wrote.

Pure functions (JSON dicts in, rows out) and a printer; bench/run_all.py calls ``summary_lines``
once every benchmark has run. Every ratio is FerryMQ / Apache RocketMQ 4.9.7 from the same run,
with the official Java client as the load (or consumer) where both clients were measured; a
msgs/s ratio above 1 means FerryMQ is faster.

``docs`` maps a source key (``BROKER``, ``SYNC_FLUSH``, ``E2E``, ``WAKE``, ``MEMORY``, ``SPARK``,
``REPLICATION``) to the JSON document that benchmark wrote, or to a string saying why there is
none (it failed, timed out, was not run); a row whose figures are not there says
``missing (why)`` instead of a verdict.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Source keys: one per benchmark run whose JSON the summary reads.
BROKER = "broker"  # bench/broker_bench.py, ASYNC_FLUSH, sync1,sync64,batch32,pull
SYNC_FLUSH = "broker_sync_flush"  # bench/broker_bench.py --flush SYNC_FLUSH --scenarios sync128
E2E = "e2e"  # bench/e2e_latency.py
WAKE = "wake"  # bench/wake_latency.py
MEMORY = "memory"  # bench/memory_bench.py
SPARK = "spark"  # bench/spark_read_bench.py
REPLICATION = "replication"  # bench/replication_bench.py (no target row; its outside load only)
TIMERS = "timers"  # bench/timer_bench.py, issue 31: against Apache RocketMQ 5.3.1 (not 4.9.7)

SOURCE_LABELS = {BROKER: "broker", SYNC_FLUSH: "broker SYNC_FLUSH", E2E: "push e2e", WAKE: "wake",
                 MEMORY: "memory", SPARK: "spark", REPLICATION: "replication", TIMERS: "timers"}
LOAD_CLIENT = "java"  # the load generator / consumer the ratios are taken with
BUSY_CORES = 0.15  # outside load above which the benches warn that figures are disturbed
# Disk use above which the reports warn: Apache's broker refuses writes at 90 % ("disk full [CL:
# 0.92]") and a nearly full file system slows both brokers' appends.
DISK_FULL_PCT = 85
MEMORY_SHAPE = (1000, 8, 10000)  # the memory row's topics, queues per topic, held pulls
RSS_TARGET_MIB = 200.0
WAKE_P50_MS, WAKE_P99_MS = 1.0, 5.0
TIMER_LATE_P99_MS = 1000  # issue 31: never early, p99 late <= 1 s at 10 000 sends/s of ordinary load
TIMER_RSS_TARGET_MIB = 300.0  # issue 31: 1 000 000 pending timers
TIMER_PENDING = 1_000_000


class Missing(Exception):
    """A figure a row needs is not in the JSON; the message says why."""


@dataclass(frozen=True)
class Figures:
    """What a row measured: each broker's figure as text, the ratio the target is about (None
    where the target is absolute), whether the target is met, and for broker_bench rows the
    broker's CPU per message, FerryMQ / Apache."""

    ferrymq: str
    apache: str
    ratio: float | None
    met: bool | None  # None: a figure reported beside the others, without a target
    cpu: str = ""
    runs: str = ""  # with several rounds: every round's ratio (the median is ``ratio``)


@dataclass(frozen=True)
class Row:
    """One target row: its name, the target as text, and either its figures or why they are missing."""

    name: str
    target: str
    figures: Figures | None = None
    missing: str | None = None

    @property
    def verdict(self) -> str:
        if self.figures is None:
            return f"missing ({self.missing})"
        if self.figures.met is None:
            return "reported"
        return "met" if self.figures.met else "NOT met"


# ---------------------------------------------------------------------------------------------
# Reading the JSON


def load(path: Path, script: str, exit_code: int) -> dict | str:
    """The JSON document a benchmark wrote to ``path``, or why there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return f"{script} wrote no JSON, exit {exit_code}"
    except (OSError, ValueError) as e:
        return f"{script}'s JSON unreadable: {e}"


def source(docs: dict, key: str) -> dict:
    """The document of one benchmark; Missing if that benchmark left none."""
    doc = docs.get(key, "not run")
    if isinstance(doc, str):
        raise Missing(doc)
    return doc


def dig(doc: dict, *keys: str):
    """``doc[k1][k2]...``; Missing (naming the path) where a key is absent or its value null."""
    value = doc
    for i, key in enumerate(keys):
        if not isinstance(value, dict) or value.get(key) is None:
            raise Missing("no " + ".".join(keys[:i + 1]))
        value = value[key]
    return value


def ratio_of(ferrymq: float, apache: float) -> float:
    if not apache:
        raise Missing("Apache's figure is 0")
    return ferrymq / apache


# ---------------------------------------------------------------------------------------------
# Formatting


def rate(msgs_per_s: float) -> str:
    return f"{msgs_per_s:,.0f} msg/s"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def p50_p99(summary: dict) -> str:
    """A latency summary's p50 / p99 (fields p50Ms, p99Ms), in ms."""
    p50, p99 = summary.get("p50Ms"), summary.get("p99Ms")
    return "-" if p50 is None or p99 is None else f"{p50:.2f} / {p99:.2f} ms"


def mib(kib: float) -> str:
    return f"{kib / 1024:,.1f} MiB"


def times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


# ---------------------------------------------------------------------------------------------
# Rows


def broker_result(doc: dict, broker: str) -> dict:
    """``results[broker]`` of a benchmark's document; Missing with its reason if that broker failed."""
    result = dig(doc, "results", broker)
    if result.get("failed"):
        raise Missing(f"{broker} failed: {str(result['failed'])[:80]}")
    return result


def broker_scenario(doc: dict, broker: str, scenario: str) -> dict:
    """broker_bench.py's figures of one scenario on one broker with the Java client: msgsPerSec,
    p50Ms/p99Ms per request, messages, brokerCpuS (the broker's CPU seconds over the scenario)."""
    client = dig(broker_result(doc, broker), "clients", LOAD_CLIENT)
    if "failed" in client:
        raise Missing(f"{broker} {LOAD_CLIENT} client failed: {client['failed'][:80]}")
    return dig(client, scenario)


def cpu_per_msg(s: dict) -> float | None:
    """The broker's CPU microseconds per message over a broker_bench scenario."""
    if s.get("brokerCpuS") is None or not s.get("messages"):
        return None
    return 1e6 * s["brokerCpuS"] / s["messages"]


def cpu_cell(f: dict, a: dict) -> str:
    """Broker CPU µs/msg, FerryMQ / Apache (and their ratio)."""
    fc, ac = cpu_per_msg(f), cpu_per_msg(a)
    text = f"{'-' if fc is None else f'{fc:.1f}'} / {'-' if ac is None else f'{ac:.1f}'}"
    return text + (f" ({fc / ac:.2f}x)" if fc is not None and ac else "")


def broker_rounds(doc: dict, scenario: str) -> list[tuple[float, dict, dict]]:
    """(msgs/s ratio, FerryMQ's figures, Apache's) of a scenario in each round of a broker_bench
    document (``rounds`` with --rounds > 1, else its one ``results``), by ratio; Missing when no
    round has both brokers' figures."""
    docs = [{"results": r} for r in doc.get("rounds") or []] or [doc]
    found, why = [], None
    for d in docs:
        try:
            f, a = broker_scenario(d, "FerryMQ", scenario), broker_scenario(d, "Apache", scenario)
            found.append((ratio_of(dig(f, "msgsPerSec"), dig(a, "msgsPerSec")), f, a))
        except Missing as e:
            why = why or e
    if not found:
        raise why or Missing("no round")
    return sorted(found, key=lambda x: x[0])


def median_round(found: list[tuple[float, dict, dict]]) -> tuple[float, dict, dict]:
    """The round judged among ``broker_rounds``' (sorted): the median, the lower middle one of an even count."""
    return found[(len(found) - 1) // 2]


def broker_figures(doc: dict, scenario: str, min_ratio: float, with_p99: bool = False) -> Figures:
    """A broker_bench scenario: msgs/s ratio >= ``min_ratio`` (and, ``with_p99``, FerryMQ's p99
    per request no higher than Apache's). With several rounds the round of the median ratio is
    judged (the lower middle one of an even count) and every round's ratio is shown."""
    found = broker_rounds(doc, scenario)
    r, f, a = median_round(found)
    runs = f" (median of {', '.join(times(x) for x, _, _ in found)})" if len(found) > 1 else ""
    met = r >= min_ratio
    if with_p99:
        met = met and dig(f, "p99Ms") <= dig(a, "p99Ms")
        return Figures(f"{rate(f['msgsPerSec'])}, p99 {ms(f['p99Ms'])}",
                       f"{rate(a['msgsPerSec'])}, p99 {ms(a['p99Ms'])}", r, met, cpu_cell(f, a), runs)
    return Figures(rate(f["msgsPerSec"]), rate(a["msgsPerSec"]), r, met, cpu_cell(f, a), runs)


def catch_up_figures(doc: dict, min_ratio: float) -> Figures:
    """e2e_latency.py's catch-up: a push consumer (Java) draining a stored backlog, messages/s
    from the first to the last message at the listener (median of the rounds)."""
    runs = {(r.get("broker"), r.get("consumer")): r for r in dig(doc, "runs")}

    def drain_rate(broker: str) -> float:
        run = runs.get((broker, LOAD_CLIENT))
        if run is None:
            raise Missing(f"no {broker} run with the {LOAD_CLIENT} consumer")
        return dig(run, "catchUp", "msgsPerSec")

    f, a = drain_rate("FerryMQ"), drain_rate("Apache")
    r = ratio_of(f, a)
    return Figures(rate(f), rate(a), r, r >= min_ratio)


def wake_figures(doc: dict) -> Figures:
    """wake_latency.py: FerryMQ's broker-side histogram (store -> held pull's response written),
    p50/p99 interpolated in its buckets, against absolute bounds; beside it each broker's
    client-side figure (send issued -> held pull's response received), Apache's only figure.

    The bench measures twice: with its client at the default scheduling policy, and at
    SCHED_BATCH so the client's wake-ups do not preempt the broker on the broker's own core
    ("isolated": what the broker adds for a consumer on another machine). The verdict is the
    isolated run's where there is one; the cell shows both."""
    ferrymq_result = broker_result(doc, "FerryMQ")
    isolated = ferrymq_result.get("isolated") or {}
    judged = isolated if isolated.get("brokerSide") else ferrymq_result
    side = dig(judged, "brokerSide")
    p50, p99 = dig(side, "p50Ms"), dig(side, "p99Ms")
    apache_result = doc["results"].get("Apache") or {}
    a_e2e = (apache_result.get("isolated") or {}).get("e2e") if judged is isolated else apache_result.get("e2e")
    ferrymq = f"p50/p99 {p50_p99(side)} (client {p50_p99(judged.get('e2e') or {})})"
    if judged is isolated:
        ferrymq = (f"{ferrymq} with the client at SCHED_BATCH; co-located client at the default policy: "
                   f"{p50_p99(ferrymq_result.get('brokerSide') or {})}")
    apache = f"client p50/p99 {p50_p99(a_e2e)}" if a_e2e else "-"
    return Figures(ferrymq, apache, None, p50 <= WAKE_P50_MS and p99 <= WAKE_P99_MS)


def spark_figures(doc: dict, min_ratio: float) -> Figures:
    """spark_read_bench.py: rows/s of a FerryMQ batch read (``read_batch``: the JVM reader by
    default, ``--reader python`` the Python source) over rows/s of Spark reading the same rows from
    Parquet (medians of the rounds); Parquet stands where Apache does elsewhere."""
    f, p = dig(doc, "results", "ferrymq", "rowsPerSec"), dig(doc, "results", "parquet", "rowsPerSec")
    r = ratio_of(f, p)
    reader = (doc.get("args") or {}).get("reader", "python")  # runs from before the JVM reader: the Python source
    return Figures(f"{f:,.0f} rows/s ({reader} reader)", f"Parquet: {p:,.0f} rows/s", r, r >= min_ratio)


def memory_figures(doc: dict) -> Figures:
    """memory_bench.py: each broker process's VmRSS while the pulls are held (phase ``held``);
    the target is absolute. When the run had another shape (``--quick``) the cell says which."""
    f = dig(broker_result(doc, "FerryMQ"), "phases", "held", "VmRSS")
    a = ((doc["results"].get("Apache") or {}).get("phases", {}).get("held") or {}).get("VmRSS")
    args = doc.get("args") or {}
    shape = (args.get("topics"), args.get("queues"), args.get("pulls"))
    note = "" if shape == MEMORY_SHAPE else f" ({shape[0]} topics x {shape[1]}, {shape[2]} pulls)"
    return Figures(mib(f) + note, "-" if a is None else mib(a), f / a if a else None, f <= RSS_TARGET_MIB * 1024)


def timer_lateness_figures(doc: dict) -> Figures:
    """timer_bench.py's lateness row: receive time minus due time of timers scheduled beside an
    ordinary load; FerryMQ never early and p99 <= 1 s (at the load rate the generator reached)."""
    def cell(broker: str) -> tuple[str, dict]:
        r = dig(doc, "results", broker, "lateness")
        if r.get("error"):
            raise Missing(f"{broker} lateness failed: {str(r['error'])[:80]}")
        late = dig(r, "lateness")
        return (f"p50/p99/max {late['p50Ms']}/{late['p99Ms']}/{late['maxMs']} ms, {late['early']} early, "
                f"load {rate(r['loadRate'])}"), late
    f, fl = cell("FerryMQ")
    try:
        a, al = cell("Apache")
    except Missing as e:
        a, al = f"missing ({e})", {}
    r = fl["p99Ms"] / al["p99Ms"] if al.get("p99Ms") else None
    return Figures(f, a, r, fl["early"] == 0 and fl["p99Ms"] <= TIMER_LATE_P99_MS)


def timer_rate_figures(doc: dict, key: str) -> Figures:
    """timer_bench.py's fire row: timers acknowledged/s (``scheduleRate``) or delivered/s once
    due (``fireRate``), FerryMQ / Apache 5.3.1; the issue asks for the figures, not a ratio."""
    f, a = (dig(doc, "results", b, "fire", key) for b in ("FerryMQ", "Apache"))

    def cell(broker: str, value: float) -> str:
        fire = doc["results"][broker]["fire"]
        lost = (fire.get("acked") or 0) - (fire.get("received") or 0)
        return rate(value) + (f" ({lost:,} acked, never delivered)" if key == "fireRate" and lost > 0 else "")

    return Figures(cell("FerryMQ", f), cell("Apache", a), ratio_of(f, a), None)


def timer_rss_figures(doc: dict) -> Figures:
    """timer_bench.py's pending row: the broker's VmRSS with the pending timers scheduled."""
    r = dig(doc, "results", "FerryMQ", "pending")
    f, n = dig(r, "rssAfterKiB"), dig(r, "acked")
    a = ((doc["results"].get("Apache") or {}).get("pending") or {}).get("rssAfterKiB")
    note = "" if n >= TIMER_PENDING else f" ({n:,} timers)"
    return Figures(mib(f) + note, "-" if a is None else mib(a), f / a if a else None,
                   n >= TIMER_PENDING and f <= TIMER_RSS_TARGET_MIB * 1024)


@dataclass(frozen=True)
class Target:
    """A row of the issue: its name, which benchmark measures it, the target, how to read it."""

    name: str
    source: str
    target: str
    figures: Callable[[dict], Figures]


def ratio_target(name: str, source: str, min_ratio: float, figures: Callable[..., Figures], **kw) -> Target:
    """A row whose target is a ratio of at least ``min_ratio`` (sync1's also wants the p99)."""
    text = f">= {min_ratio:.1f}x" + (" and p99 F <= A" if kw.get("with_p99") else "")
    return Target(name, source, text, functools.partial(figures, min_ratio=min_ratio, **kw))


TARGETS = (
    ratio_target("sync1 msgs/s + p99 (1 in flight)", BROKER, 1.0, broker_figures, scenario="sync1", with_p99=True),
    ratio_target("sync64 msgs/s", BROKER, 1.0, broker_figures, scenario="sync64"),
    ratio_target("batch32 msgs/s", BROKER, 1.0, broker_figures, scenario="batch32"),
    ratio_target("pull (drain) msgs/s", BROKER, 1.2, broker_figures, scenario="pull"),
    ratio_target("push catch-up msgs/s", E2E, 1.0, catch_up_figures),
    ratio_target("SYNC_FLUSH sync128 msgs/s", SYNC_FLUSH, 1.5, broker_figures, scenario="sync128"),
    Target("long-poll wake, store -> consumer", WAKE, f"p50 <= {WAKE_P50_MS:g} ms, p99 <= {WAKE_P99_MS:g} ms",
           wake_figures),
    ratio_target("Spark batch read vs Parquet", SPARK, 0.6, spark_figures),
    Target("broker RSS, 1000 topics x 8, 10000 held pulls", MEMORY, f"F <= {RSS_TARGET_MIB:g} MiB",
           memory_figures),
    Target("timers: lateness under 10k sends/s (vs 5.3.1)", TIMERS,
           f"F 0 early, p99 <= {TIMER_LATE_P99_MS} ms", timer_lateness_figures),
    Target("timers: schedule rate (vs 5.3.1)", TIMERS, "reported",
           functools.partial(timer_rate_figures, key="scheduleRate")),
    Target("timers: fire rate (vs 5.3.1)", TIMERS, "reported", functools.partial(timer_rate_figures, key="fireRate")),
    Target("timers: broker RSS, 1 000 000 pending", TIMERS, f"F < {TIMER_RSS_TARGET_MIB:g} MiB", timer_rss_figures),
)


def build_row(target: Target, docs: dict) -> Row:
    try:
        return Row(target.name, target.target, figures=target.figures(source(docs, target.source)))
    except Missing as e:
        return Row(target.name, target.target, missing=str(e))


def build_rows(docs: dict) -> list[Row]:
    """Every target row, in the issue's order."""
    return [build_row(t, docs) for t in TARGETS]


# ---------------------------------------------------------------------------------------------
# Outside load and printing


def outside_load(docs: dict) -> list[str]:
    """The CPU other processes used during each benchmark that measured it (broker_bench's
    OutsideLoad: cores on average over the run), and the load average before the first."""
    cores, steal, before, loops, disk = [], [], None, [], []
    for key, label in SOURCE_LABELS.items():
        doc = docs.get(key)
        machine = (doc.get("machine") or {}) if isinstance(doc, dict) else {}
        if machine.get("other_cpu_cores") is not None:
            cores.append((label, machine["other_cpu_cores"]))
            if machine.get("steal_cores") is not None:
                steal.append((label, machine["steal_cores"]))
            before = before or machine.get("loadavg_before")
        if machine.get("python_loop_s") is not None:
            loops.append(machine["python_loop_s"])
        if machine.get("disk_used_pct") is not None:
            disk.append(machine["disk_used_pct"])
    if not cores:
        return ["outside load: not measured (no benchmark wrote it)"]
    line = "outside load, CPU cores used by other processes (average over each bench): " + \
        ", ".join(f"{label} {c:.2f}" for label, c in cores)
    if steal:  # a shared VM: the hypervisor's share is in the figure above, said apart here
        line += " (of which hypervisor steal: " + ", ".join(f"{label} {c:.2f}" for label, c in steal) + ")"
    busy = [label for label, c in cores if c > BUSY_CORES]
    lines = [line, f"load average before the first: {before}"]
    if loops:
        lines.append(f"CPU calibration, a 10 M-iteration Python loop: {min(loops):.2f}-{max(loops):.2f} s "
                     "(compare runs only at similar values)")
    if disk:
        lines.append(f"disk used: {min(disk):.0f}-{max(disk):.0f} %")
    if busy:
        lines.append(f"WARNING: the machine was not idle during {', '.join(busy)}: those figures are disturbed")
    if disk and max(disk) > DISK_FULL_PCT:
        lines.append(f"WARNING: the disk was up to {max(disk):.0f} % full: Apache refuses writes at 90 % and "
                     "appends slow down near it; free space and run again")
    return lines


COLUMNS = ("row", "FerryMQ", "Apache (or reference)", "F/A", "broker CPU us/msg F / A", "target", "verdict")
NOTES = (
    "F/A: FerryMQ / Apache (msgs/s: > 1 means FerryMQ is faster); broker rows: the official Java client as the "
    "load, sync128 with both brokers on SYNC_FLUSH; push catch-up: the Java push consumer draining a backlog",
    "wake: FerryMQ's broker-side histogram (store -> held pull's response written), judged with the bench's client "
    "at SCHED_BATCH (it must not preempt the broker on its own core); client = send issued -> held pull's response "
    "received, in the bench process (Apache's only figure)",
    "Spark: the reference is Spark reading the same rows from Parquet; RSS: the broker process's VmRSS with the "
    "pulls held",
)


def cells(row: Row) -> tuple[str, ...]:
    f = row.figures
    if f is None:
        return (row.name, "-", "-", "-", "", row.target, row.verdict)
    return (row.name, f.ferrymq, f.apache, times(f.ratio) + f.runs, f.cpu, row.target, row.verdict)


def table(rows: list[Row]) -> list[str]:
    """The rows as text columns, each as wide as its widest cell."""
    lines = [COLUMNS, *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]


def summary_lines(docs: dict) -> list[str]:
    """The whole summary: title, outside load, the table, and a count of rows met."""
    rows = build_rows(docs)
    met = sum(1 for r in rows if r.verdict == "met")
    judged = sum(1 for r in rows if r.verdict != "reported")
    return ["", "== issue 11 (and 31: timers, against Apache 5.3.1) targets: FerryMQ / Apache RocketMQ 4.9.7 in this "
            "run (Java client as the load) ==",
            *outside_load(docs), *table(rows), *NOTES,
            f"{met} of {judged} targets met, {sum(1 for r in rows if r.figures is None)} missing"]


def print_summary(docs: dict, file=None) -> None:
    print("\n".join(summary_lines(docs)), file=file, flush=True)
