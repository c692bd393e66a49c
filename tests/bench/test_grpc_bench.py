"""bench/grpc_bench.py: its report from rows shaped as it measures them, and (slow, compat) its
Apache path: Apache's proxy in local mode, the broker in the proxy's JVM, measured with a few
messages per scenario."""

from __future__ import annotations

import argparse
import io

import pytest

from tests.support import missing_prerequisite
from tests.bench import load_bench_module

grpc_bench = load_bench_module("grpc_bench")


def args(**over) -> argparse.Namespace:
    base = dict(messages=20_000, size=1024, warmup=2000, broker_warmup=10_000, threads=[1, 16],
                modes=["disabled"], brokers=["ferrymq", "apache"], quick=False, json=None)
    return argparse.Namespace(**{**base, **over})


def row(broker: str, scenario: str, msgs_per_s: float, cpu_us: float, mode: str = "disabled") -> dict:
    return {"broker": broker, "mode": mode, "scenario": scenario, "messages": 20_000, "seconds": 20_000 / msgs_per_s,
            "msgs_per_s": msgs_per_s, "broker_cpu_s": cpu_us * 22_000 / 1e6, "broker_cpu_us_per_msg": cpu_us}


ROWS = [
    row("FerryMQ", "5x-send-1", 1000, 600), row("FerryMQ", "5x-send-16", 3000, 300),
    row("FerryMQ", "5x-simple", 2000, 200), row("FerryMQ", "4x-sync1", 2500, 300),
    row("FerryMQ", "4x-sync16", 8000, 100), row("FerryMQ", "4x-pull", 40_000, 10),
    row("Apache", "5x-send-1", 500, 900), row("Apache", "5x-send-16", 4000, 250),
    row("Apache", "5x-simple", 1000, 400), row("Apache", "4x-sync1", 1500, 600),
    row("Apache", "4x-sync16", 5000, 200), row("Apache", "4x-pull", 20_000, 50),
]


def test_summary_has_ferrymq_over_apache_per_5x_scenario_and_each_brokers_send_cost():
    s = grpc_bench.summary(ROWS, args())
    ratios = {r["scenario"]: round(r["throughput_ratio"], 2) for r in s["ratios"]}
    assert ratios == {"5x-send-1": 2.0, "5x-send-16": 0.75, "5x-simple": 2.0}
    costs = {(c["broker"], c["pair"]): round(c["cost_ratio"], 2) for c in s["send_costs"]}
    assert costs == {("FerryMQ", "5x-send-1 / 4x-sync1"): 2.0, ("FerryMQ", "5x-send-16 / 4x-sync16"): 3.0,
                     ("Apache", "5x-send-1 / 4x-sync1"): 1.5, ("Apache", "5x-send-16 / 4x-sync16"): 1.25}


def test_report_is_one_table_of_both_brokers_with_the_verdicts_and_load():
    out = io.StringIO()
    info = {"nproc": 2, "loadavg_before": "0.10 0.20 0.30", "loadavg_after": "1.00 0.50 0.40",
            "other_cpu_cores": 0.0}
    grpc_bench.print_report(info, ROWS, {"apache permissive": "boom"}, args(), file=out)
    text = out.getvalue()
    table = [line for line in text.splitlines() if line.startswith("disabled")]
    assert [line.split()[1] for line in table] == ["5x-send-1", "5x-send-16", "5x-simple", "4x-sync1", "4x-sync16",
                                                     "4x-pull"]
    assert table[1].split()[2:] == ["3,000", "300", "4,000", "250", "0.75x", "1.20x"]
    words = [line.split() for line in text.splitlines()]
    assert ["Apache", "disabled", "5x-send-16", "/", "4x-sync16", "1.25x", "met"] in words
    assert ["FerryMQ", "disabled", "5x-send-1", "/", "4x-sync1", "2.00x", "NOT", "met"] in words
    assert "minimum 0.75x (disabled 5x-send-16" in text
    assert "FAILED apache permissive: boom" in text
    assert "load average before: 0.10 0.20 0.30   after: 1.00 0.50 0.40" in text


def test_a_broker_missing_from_a_mode_leaves_dashes_not_ratios():
    rows = [r for r in ROWS if r["broker"] == "FerryMQ"]
    assert grpc_bench.summary(rows, args())["ratios"] == []
    out = io.StringIO()
    grpc_bench.print_report({}, rows, {}, args(), file=out)
    first = next(line for line in out.getvalue().splitlines() if line.startswith("disabled"))
    assert first.split()[2:] == ["1,000", "600", "-", "-", "-", "-"]


def test_local_mode_needs_a_proxy_and_runs_the_proxys_own_broker():
    from testkit.apache import PROXY_VERSION, ApacheRocketMQ
    from testkit.java_client import ROCKETMQ5_VERSION

    with pytest.raises(ValueError, match="needs proxy_version"):
        ApacheRocketMQ(proxy_mode="local")
    with pytest.raises(ValueError, match="one of cluster, local"):
        ApacheRocketMQ(proxy_version=PROXY_VERSION, proxy_mode="remote")
    with pytest.raises(ValueError, match="the proxy's own broker"):
        ApacheRocketMQ(proxy_version=PROXY_VERSION, proxy_mode="local", broker_version=ROCKETMQ5_VERSION)
    assert ApacheRocketMQ(proxy_version=PROXY_VERSION, proxy_mode="local").broker_version == PROXY_VERSION
    assert ApacheRocketMQ(proxy_version=PROXY_VERSION).broker_pid is None  # not started


@pytest.mark.compat
@pytest.mark.slow
def test_apache_proxy_in_local_mode_serves_the_benchs_5x_and_4x_scenarios(tmp_path):
    """The bench's Apache: ``ProxyStartup -pm local`` builds the broker in its own JVM (one
    process beside the name server), serves gRPC (plaintext and TLS: permissive) and remoting on
    the broker's port; every scenario runs on it with a few messages, its CPU counted."""
    from testkit.apache import PROXY_VERSION
    from testkit.apache import namesrv_cluster_info

    if why := grpc_bench.apache_available():
        missing_prerequisite(f"compat: Maven Central unreachable: {why}")
    target = grpc_bench.ApacheTarget(tmp_path, "permissive")
    target.mq.startup_timeout = 120
    target.start()
    try:
        mq = target.mq
        assert [p.name for p in mq._procs] == ["namesrv", "proxy"]  # no broker process of its own
        assert target.pid == mq._procs[1].popen.pid
        assert mq.broker_version == PROXY_VERSION
        assert mq.broker_addr in namesrv_cluster_info(mq.namesrv_addr)
        small = args(messages=30, size=256, warmup=5, broker_warmup=0, threads=[1, 2], modes=["permissive"])
        rows = grpc_bench.run_scenarios(target, "permissive", small)
    finally:
        target.stop()
    by = {r["scenario"]: r for r in rows}
    assert list(by) == ["5x-send-1", "5x-send-2", "5x-send-2-tls", "5x-simple", "4x-sync1", "4x-sync2", "4x-pull"]
    for name in ("5x-send-1", "5x-send-2", "5x-send-2-tls", "4x-sync1", "4x-sync2"):
        assert by[name]["messages"] == 30, by[name]
    assert by["5x-simple"]["messages"] == 3 * (30 + 5)  # everything the three 5.x send rows put there
    assert by["4x-pull"]["messages"] == 2 * (30 + 5)
    assert all(r["broker"] == "Apache" and r["broker_cpu_s"] > 0 and r["msgs_per_s"] > 0 for r in rows)
