"""bench/targets.py: issue 11's summary rows from JSON documents shaped as the benchmarks write them."""

from __future__ import annotations

import copy

from tests.bench import load_bench_module

targets = load_bench_module("targets")


# ---------------------------------------------------------------------------------------------
# Samples, shaped as each benchmark's --json writes them (trimmed to the fields read, plus a few)


def machine(other_cores: float = 0.05, python_loop_s: float = 0.6) -> dict:
    return {"date": "2025-01-01T00:00:00+00:00", "nproc": "2", "loadavg_before": "0.10 0.20 0.30",
            "elapsedS": 100.0, "other_cpu_cores": other_cores, "python_loop_s": python_loop_s}


def scenario(msgs_per_s: float, p99_ms: float, messages: int = 5000, broker_cpu_s: float = 0.25) -> dict:
    """One broker_bench scenario as the Java BenchLoad reports it (plus brokerCpuS)."""
    return {"messages": messages, "requests": messages, "errors": 0, "firstError": None, "elapsedS": 1.0,
            "msgsPerSec": msgs_per_s, "p50Ms": p99_ms / 2, "p99Ms": p99_ms, "maxMs": p99_ms * 2,
            "clientCpuS": 0.5, "brokerCpuS": broker_cpu_s}


def broker_doc(ferrymq: dict, apache: dict) -> dict:
    """broker_bench.py --json: results[broker].clients[client][scenario]."""
    python = {name: scenario(1000, 1.0) for name in ferrymq}
    return {"machine": machine(), "args": {"quick": True, "flush": "ASYNC_FLUSH"},
            "results": {"FerryMQ": {"clients": {"python": python, "java": ferrymq}, "problems": [], "startupS": 1.0},
                        "Apache": {"clients": {"python": python, "java": apache}, "problems": [], "startupS": 5.0}}}


def e2e_doc(ferrymq_rate: float, apache_rate: float) -> dict:
    def run(broker: str, consumer: str, msgs_per_s: float) -> dict:
        catch_up = {"messages": 5000, "elapsedS": 5000 / msgs_per_s, "msgsPerSec": msgs_per_s}
        latency = {"messages": 1200, "sendRate": 300.0, "p50Ms": 1.0, "p99Ms": 3.0, "maxMs": 9.0}
        return {"broker": broker, "consumer": consumer, "latency": latency, "catchUp": catch_up,
                "rounds": {"latency": [latency], "catchUp": [catch_up]}}

    return {"machine": {"date": "2025-01-01T00:00:00+00:00", "nproc": "2", "cpu": "x", "python": "3.12",
                        "commit": "abc"},
            "runs": [run("FerryMQ", "python", 1.0), run("FerryMQ", "java", ferrymq_rate),
                     run("Apache", "python", 1.0), run("Apache", "java", apache_rate)]}


def wake_summary(p50: float, p99: float) -> dict:
    return {"n": 300, "p50Ms": p50, "p90Ms": p99, "p99Ms": p99, "maxMs": p99 * 2, "meanMs": p50}


def wake_doc(p50: float, p99: float) -> dict:
    buckets = {"0.0005": 100.0, "0.001": 280.0, "+Inf": 300.0, "sum": 0.2, "count": 300.0}
    ferrymq = {"elapsedS": 3.0, "brokerCpuS": 0.3, "e2e": wake_summary(0.4, 0.9), "send": wake_summary(0.2, 0.5),
               "early": 0, "errors": 0, "firstError": None, "problems": [],
               "brokerSide": {"n": 300.0, "meanMs": 0.6, "p50Ms": p50, "p99Ms": p99, "buckets": buckets}}
    apache = {"elapsedS": 3.0, "brokerCpuS": 0.3, "e2e": wake_summary(0.5, 1.5), "send": wake_summary(0.3, 0.7),
              "early": 0, "errors": 0, "firstError": None, "problems": []}
    return {"machine": machine(0.3), "args": {"wakes": 300}, "results": {"FerryMQ": ferrymq, "Apache": apache}}


def memory_doc(ferrymq_held_kib: int, topics: int = 1000, pulls: int = 10000) -> dict:
    def phases(held_kib: int) -> dict:
        status = {"VmRSS": held_kib, "VmHWM": held_kib, "RssAnon": held_kib // 2, "RssFile": held_kib // 2,
                  "Threads": 10}
        return {phase: dict(status) for phase in ("idle", "topics", "messages", "held", "answered")}

    return {"machine": machine(), "args": {"topics": topics, "queues": 8, "pulls": pulls, "connections": 100},
            "results": {"FerryMQ": {"phases": phases(ferrymq_held_kib), "held": pulls, "problems": []},
                        "Apache": {"phases": phases(600 * 1024), "held": pulls, "problems": []}}}


def spark_doc(ferrymq_rate: float, parquet_rate: float) -> dict:
    def read(rate: float) -> dict:
        return {"medianS": 20000 / rate, "rowsPerSec": rate, "rowsPerSecPerCore": rate / 2}

    return {"args": {"messages": 20000, "cores": 2, "rounds": 1, "record": False, "json": "x.json"},
            "results": {"ferrymq": read(ferrymq_rate), "parquet": read(parquet_rate),
                        "ratio": ferrymq_rate / parquet_rate, "brokerCpuS": 1.0, "produceS": 2.0,
                        "parquetCopyS": 3.0}}


def timers_doc(ferrymq_p99: int = 800, early: int = 0, rss_kib: int = 200 * 1024, pending: int = 1_000_000) -> dict:
    """timer_bench.py --json: results[broker].{lateness,fire,pending} as TimerBench reports them."""
    def broker(p99: int, early: int, schedule: float, fire: float, rss: int) -> dict:
        late = {"count": 4000, "early": early, "minMs": -5 if early else 10, "p50Ms": p99 // 2, "p99Ms": p99,
                "maxMs": p99 + 100}
        return {"lateness": {"mode": "lateness", "loadRate": 9500.0, "loadFailed": 0, "received": 4000, "lateness": late},
                "fire": {"mode": "throughput", "acked": 200000, "failed": 0, "scheduleRate": schedule,
                         "fireRate": fire, "received": 200000, "lateness": dict(late)},
                "pending": {"mode": "pending", "acked": pending, "failed": 0, "scheduleRate": schedule,
                            "rssBeforeKiB": 100 * 1024, "rssAfterKiB": rss}}

    return {"machine": machine(), "args": {"quick": False},
            "results": {"FerryMQ": broker(ferrymq_p99, early, 4000.0, 6000.0, rss_kib),
                        "Apache": broker(1000, 0, 8000.0, 3000.0, 900 * 1024)}}


def all_met() -> dict:
    java = {"sync1": scenario(2000, 0.5), "sync64": scenario(20000, 5.0), "batch32": scenario(50000, 2.0),
            "pull": scenario(120000, 3.0)}
    apache_java = {"sync1": scenario(1500, 0.8), "sync64": scenario(15000, 6.0), "batch32": scenario(40000, 2.5),
                   "pull": scenario(90000, 4.0, broker_cpu_s=0.5)}
    return {targets.BROKER: broker_doc(java, apache_java),
            targets.SYNC_FLUSH: broker_doc({"sync128": scenario(16000, 20.0)}, {"sync128": scenario(10000, 30.0)}),
            targets.E2E: e2e_doc(30000, 25000),
            targets.WAKE: wake_doc(0.6, 0.95),
            targets.MEMORY: memory_doc(150 * 1024),
            targets.SPARK: spark_doc(70000, 100000),
            targets.TIMERS: timers_doc(),
            targets.REPLICATION: {"machine": machine(0.2), "args": {}, "results": {}}}


def java(docs: dict, key: str, broker: str) -> dict:
    """The Java client's scenarios of one broker in a broker_bench sample."""
    return docs[key]["results"][broker]["clients"]["java"]


def by_name(docs: dict) -> dict:
    return {row.name: row for row in targets.build_rows(docs)}


def verdicts(docs: dict, *names: str) -> list[str]:
    rows = by_name(docs)
    return [rows[name].verdict for name in names]


# ---------------------------------------------------------------------------------------------


def test_every_row_met_with_its_ratio():
    rows = targets.build_rows(all_met())
    assert [r.name for r in rows] == [t.name for t in targets.TARGETS]
    reported = {"timers: schedule rate (vs 5.3.1)", "timers: fire rate (vs 5.3.1)"}  # no target: figures only
    assert [r.verdict for r in rows] == ["reported" if r.name in reported else "met" for r in rows]
    ratios = {r.name: r.figures.ratio for r in rows}
    assert abs(ratios["pull (drain) msgs/s"] - 120000 / 90000) < 1e-9
    assert abs(ratios["SYNC_FLUSH sync128 msgs/s"] - 1.6) < 1e-9
    assert abs(ratios["Spark batch read vs Parquet"] - 0.7) < 1e-9
    assert ratios["long-poll wake, store -> consumer"] is None


def test_broker_rows_show_cpu_per_message_of_both_brokers():
    pull = by_name(all_met())["pull (drain) msgs/s"]
    # 0.25 s / 5000 messages = 50 us/msg for FerryMQ; 0.5 s / 5000 = 100 us/msg for Apache
    assert pull.figures.cpu == "50.0 / 100.0 (0.50x)"


def test_ratio_below_target_is_not_met():
    docs = all_met()
    java(docs, targets.BROKER, "FerryMQ")["pull"]["msgsPerSec"] = 100000  # 1.11x < 1.2x
    java(docs, targets.SYNC_FLUSH, "FerryMQ")["sync128"]["msgsPerSec"] = 14000  # 1.4x
    assert verdicts(docs, "pull (drain) msgs/s", "SYNC_FLUSH sync128 msgs/s", "sync64 msgs/s") == \
        ["NOT met", "NOT met", "met"]


def test_sync1_needs_the_p99_too():
    docs = all_met()
    java(docs, targets.BROKER, "FerryMQ")["sync1"]["p99Ms"] = 0.9  # Apache: 0.8
    row = by_name(docs)["sync1 msgs/s + p99 (1 in flight)"]
    assert row.figures.ratio > 1.0
    assert row.verdict == "NOT met"
    assert "p99 0.90 ms" in row.figures.ferrymq


def with_rounds(doc: dict, *ferrymq_sync64: float) -> dict:
    """``doc`` (a broker_bench sample) as --rounds writes it: its results as the first round, then
    one round per rate given, FerryMQ's sync64 at that rate (Apache's unchanged)."""
    rounds = [doc["results"]]
    for rate in ferrymq_sync64:
        r = copy.deepcopy(doc["results"])
        r["FerryMQ"]["clients"]["java"]["sync64"]["msgsPerSec"] = rate
        del r["FerryMQ"]["clients"]["python"]  # later rounds run the Java client only
        rounds.append(r)
    return {**doc, "rounds": rounds}


def test_several_rounds_are_judged_by_their_median_ratio_and_every_ratio_is_shown():
    docs = all_met()  # sync64: FerryMQ 20 000 against Apache 15 000 in the first round
    docs[targets.BROKER] = with_rounds(docs[targets.BROKER], 12000, 14000)  # 0.80x, 0.93x
    row = by_name(docs)["sync64 msgs/s"]
    assert row.verdict == "NOT met" and round(row.figures.ratio, 2) == 0.93
    assert row.figures.ferrymq == "14,000 msg/s"  # the figures of the round judged
    line = next(line for line in targets.summary_lines(docs) if "sync64" in line)
    assert "0.93x (median of 0.80x, 0.93x, 1.33x)" in line
    docs[targets.BROKER] = with_rounds(all_met()[targets.BROKER], 16000, 9000)  # 1.07x, 0.60x
    assert by_name(docs)["sync64 msgs/s"].verdict == "met"  # 0.60 / 1.07 / 1.33: the median is met


def test_a_round_without_figures_leaves_the_median_to_the_others():
    docs = all_met()
    doc = with_rounds(docs[targets.BROKER], 16000, 16000)
    doc["rounds"][1]["Apache"]["clients"]["java"] = {"failed": "TimeoutExpired: 60 s"}
    docs[targets.BROKER] = doc
    row = by_name(docs)["sync64 msgs/s"]
    assert row.verdict == "met" and "median of 1.07x, 1.33x" in targets.cells(row)[3]


def test_a_benchmark_without_json_makes_its_rows_missing():
    docs = all_met()
    docs[targets.BROKER] = "broker_bench.py wrote no JSON, exit 1"
    del docs[targets.SPARK]
    assert verdicts(docs, "sync64 msgs/s", "Spark batch read vs Parquet", "SYNC_FLUSH sync128 msgs/s") == \
        ["missing (broker_bench.py wrote no JSON, exit 1)", "missing (not run)", "met"]


def test_failed_java_client_or_absent_apache_is_missing():
    docs = all_met()
    docs[targets.BROKER]["results"]["Apache"]["clients"]["java"] = {"failed": "TimeoutExpired: 60 s"}
    del docs[targets.SYNC_FLUSH]["results"]["Apache"]
    assert verdicts(docs, "batch32 msgs/s", "SYNC_FLUSH sync128 msgs/s") == \
        ["missing (Apache java client failed: TimeoutExpired: 60 s)", "missing (no results.Apache)"]


def test_catch_up_uses_the_java_consumer():
    docs = all_met()
    docs[targets.E2E]["runs"] = [r for r in docs[targets.E2E]["runs"] if r["consumer"] == "python"]
    assert verdicts(docs, "push catch-up msgs/s") == ["missing (no FerryMQ run with the java consumer)"]


def test_wake_is_absolute_and_shows_apache_client_side():
    docs = all_met()
    row = by_name(docs)["long-poll wake, store -> consumer"]
    assert row.figures.apache == "client p50/p99 0.50 / 1.50 ms"
    docs[targets.WAKE]["results"]["FerryMQ"]["brokerSide"]["p99Ms"] = 5.5
    del docs[targets.WAKE]["results"]["Apache"]
    row = by_name(docs)["long-poll wake, store -> consumer"]
    assert (row.verdict, row.figures.apache) == ("NOT met", "-")
    del docs[targets.WAKE]["results"]["FerryMQ"]["brokerSide"]
    assert verdicts(docs, "long-poll wake, store -> consumer") == ["missing (no brokerSide)"]


def test_wake_is_judged_by_the_run_whose_client_does_not_preempt_the_broker():
    docs = all_met()
    wake = docs[targets.WAKE]["results"]
    isolated = {**wake["FerryMQ"], "brokerSide": {**wake["FerryMQ"]["brokerSide"], "p50Ms": 0.45}}
    wake["FerryMQ"]["isolated"] = isolated
    wake["FerryMQ"]["brokerSide"]["p50Ms"] = 1.2  # the co-located client's preemption counted in
    wake["Apache"]["isolated"] = {**wake["Apache"], "e2e": wake_summary(0.7, 2.0)}
    row = by_name(docs)["long-poll wake, store -> consumer"]
    assert row.verdict == "met"
    assert row.figures.ferrymq.startswith("p50/p99 0.45 / 0.95 ms")
    assert "default policy: 1.20 / 0.95 ms" in row.figures.ferrymq
    assert row.figures.apache == "client p50/p99 0.70 / 2.00 ms"
    isolated["brokerSide"]["p99Ms"] = 6.0
    assert verdicts(docs, "long-poll wake, store -> consumer") == ["NOT met"]


def test_a_broker_that_failed_says_why():
    docs = all_met()
    error = "TypeError: Connection.__init__() takes from 1 to 2 positional arguments but 3 were given"
    docs[targets.MEMORY]["results"]["FerryMQ"] = {"failed": error, "phases": {}, "problems": []}
    docs[targets.WAKE]["results"]["FerryMQ"] = {"failed": error, "problems": []}
    assert verdicts(docs, "broker RSS, 1000 topics x 8, 10000 held pulls", "long-poll wake, store -> consumer") == \
        [f"missing (FerryMQ failed: {error[:80]})"] * 2


def test_memory_row_says_a_smaller_run_shape():
    docs = all_met()
    docs[targets.MEMORY] = memory_doc(250 * 1024, topics=200, pulls=2000)
    row = by_name(docs)["broker RSS, 1000 topics x 8, 10000 held pulls"]
    assert row.verdict == "NOT met"
    assert row.figures.ferrymq == "250.0 MiB (200 topics x 8, 2000 pulls)"
    assert row.figures.apache == "600.0 MiB"


def test_summary_prints_every_row_and_the_outside_load():
    docs = all_met()
    docs[targets.E2E] = "e2e_latency.py wrote no JSON, exit 1"
    text = "\n".join(targets.summary_lines(docs))
    for t in targets.TARGETS:
        assert t.name in text
    assert "missing (e2e_latency.py wrote no JSON, exit 1)" in text
    assert "broker 0.05" in text and "wake 0.30" in text and "replication 0.20" in text
    assert "WARNING: the machine was not idle during wake, replication" in text
    assert "10 of 11 targets met, 1 missing" in text


def test_summary_says_how_much_of_the_outside_load_the_hypervisor_took():
    docs = all_met()
    docs[targets.BROKER]["machine"]["steal_cores"] = 0.27  # a shared VM's neighbours
    text = "\n".join(targets.summary_lines(docs))
    assert "(of which hypervisor steal: broker 0.27)" in text


def test_summary_warns_of_a_nearly_full_disk():
    docs = all_met()
    assert "disk was up to" not in "\n".join(targets.summary_lines(docs))
    docs[targets.BROKER]["machine"]["disk_used_pct"] = 91.6  # Apache's broker refuses writes above 90 %
    docs[targets.WAKE]["machine"]["disk_used_pct"] = 64.0
    text = "\n".join(targets.summary_lines(docs))
    assert "disk used: 64-92 %" in text
    assert "WARNING: the disk was up to 92 % full" in text


def test_summary_says_how_fast_the_host_ran_python():
    docs = all_met()
    docs[targets.BROKER]["machine"]["python_loop_s"] = 1.41  # a slow session among quick ones
    text = "\n".join(targets.summary_lines(docs))
    assert "a 10 M-iteration Python loop: 0.60-1.41 s" in text


def test_summary_of_nothing_still_lists_every_row():
    lines = targets.summary_lines({})
    assert sum("missing (not run)" in line for line in lines) == len(targets.TARGETS)
    assert any("outside load: not measured" in line for line in lines)


def test_load_says_why_there_is_no_document(tmp_path):
    assert targets.load(tmp_path / "none.json", "wake_latency.py", 1) == "wake_latency.py wrote no JSON, exit 1"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert targets.load(bad, "memory_bench.py", 0).startswith("memory_bench.py's JSON unreadable")
    good = tmp_path / "good.json"
    good.write_text('{"results": {}}')
    assert targets.load(good, "memory_bench.py", 1) == {"results": {}}


def test_building_rows_leaves_the_documents_alone():
    docs = all_met()
    before = copy.deepcopy(docs)
    targets.build_rows(docs)
    assert docs == before  # building rows reads the documents only


def test_timer_rows_judge_ferrymq_lateness_and_rss_and_report_the_rates_against_apache():
    rows = by_name(all_met())
    late = rows["timers: lateness under 10k sends/s (vs 5.3.1)"]
    assert abs(late.figures.ratio - 0.8) < 1e-9  # p99 800 ms against Apache's 1000
    assert "0 early" in late.figures.ferrymq and "9,500 msg/s" in late.figures.apache
    assert abs(rows["timers: schedule rate (vs 5.3.1)"].figures.ratio - 0.5) < 1e-9
    assert abs(rows["timers: fire rate (vs 5.3.1)"].figures.ratio - 2.0) < 1e-9
    assert rows["timers: broker RSS, 1 000 000 pending"].figures.ferrymq == "200.0 MiB"


def test_a_timer_delivered_early_or_late_or_a_big_broker_is_not_met():
    names = ("timers: lateness under 10k sends/s (vs 5.3.1)", "timers: broker RSS, 1 000 000 pending")
    docs = all_met()
    docs[targets.TIMERS] = timers_doc(early=1)
    assert verdicts(docs, *names) == ["NOT met", "met"]
    docs[targets.TIMERS] = timers_doc(ferrymq_p99=1500, rss_kib=320 * 1024)
    assert verdicts(docs, *names) == ["NOT met", "NOT met"]


def test_a_quick_run_with_fewer_pending_timers_says_so_and_is_not_met():
    docs = all_met()
    docs[targets.TIMERS] = timers_doc(pending=100_000)
    row = by_name(docs)["timers: broker RSS, 1 000 000 pending"]
    assert row.figures.ferrymq == "200.0 MiB (100,000 timers)" and row.verdict == "NOT met"


def test_a_failed_timer_row_is_missing_with_its_reason():
    docs = all_met()
    docs[targets.TIMERS]["results"]["FerryMQ"]["lateness"] = {"error": "load generator timed out after 220 s"}
    row = by_name(docs)["timers: lateness under 10k sends/s (vs 5.3.1)"]
    assert row.verdict == "missing (FerryMQ lateness failed: load generator timed out after 220 s)"


def test_the_fire_row_says_how_many_acknowledged_timers_never_arrived():
    docs = all_met()
    docs[targets.TIMERS]["results"]["FerryMQ"]["fire"]["received"] = 100_000
    row = by_name(docs)["timers: fire rate (vs 5.3.1)"]
    assert row.figures.ferrymq == "6,000 msg/s (100,000 acked, never delivered)"
    assert row.figures.apache == "3,000 msg/s"
