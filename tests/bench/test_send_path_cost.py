"""bench/send_path_cost.py against a real broker on this test's loop: a few sends, each answered
SUCCESS, give figures for the broker and the echo server; a refused send stops the bench."""

from __future__ import annotations

import pytest

from tests.bench import load_bench_module

send_path_cost = load_bench_module("send_path_cost")

pytestmark = pytest.mark.integration


async def test_a_short_run_measures_the_broker_and_the_echo(monkeypatch):
    monkeypatch.setattr(send_path_cost, "WARM_UP", 50)
    figures = await send_path_cost.measure(messages=40, rounds=2, body=256)
    assert figures["broker_cpu_us"] > 0 and figures["echo_cpu_us"] > 0
    assert set(figures) == {"broker_cpu_us", "echo_cpu_us", "broker_wall_us", "send_path_us", "in_echoes"}


async def test_sends_the_broker_refuses_stop_the_bench(monkeypatch):
    monkeypatch.setattr(send_path_cost, "WARM_UP", 20)
    monkeypatch.setattr(send_path_cost, "TOPIC", "bad topic name")  # refused: not a valid topic name
    with pytest.raises(SystemExit, match="refused"):
        await send_path_cost.measure(messages=10, rounds=1, body=64)
