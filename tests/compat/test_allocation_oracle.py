"""FerryMQ's allocation strategies against RocketMQ 4.9.7's own classes, on random inputs.

A Java and a Python member of one consumer group each compute their own share; the group is
only covered exactly once if both compute the same function. AllocationOracle.java runs the
Java strategies on the same cases."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from ferrymq.client.allocation import (
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_machine_room,
    allocate_consistent_hash,
)
from ferrymq.common.protocol import MessageQueue

from testkit.java_client import java_client_command

pytestmark = pytest.mark.compat


def random_case(rng: random.Random) -> dict:
    strategy = rng.choice(["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "MACHINE_ROOM"])
    rooms = ["room1", "room2", "room3"]
    brokers = [f"{rng.choice(rooms)}@broker-{c}" if strategy == "MACHINE_ROOM" else f"broker-{c}"
               for c in "abc"[: rng.randint(1, 3)]]
    topic = rng.choice(["T", "Orders", "%RETRY%g"])
    mqs = sorted({(topic, b, q) for b in brokers for q in range(rng.randint(1, 12))})
    cids = sorted({f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 9)}@{rng.randint(1, 99999)}#{rng.randint(1, 10**9)}"
                   for _ in range(rng.randint(1, 7))})
    return {"strategy": strategy, "group": "g", "cid": rng.choice(cids), "mqs": [list(m) for m in mqs], "cids": cids,
            "idcs": rng.sample(rooms, rng.randint(1, 3)), "virtualNodes": rng.choice([1, 5, 10])}


def python_share(case: dict) -> list[list]:
    mqs = [MessageQueue(*m) for m in case["mqs"]]
    args = ("g", case["cid"], mqs, case["cids"])
    match case["strategy"]:
        case "AVG":
            out = allocate_averagely(*args)
        case "AVG_BY_CIRCLE":
            out = allocate_averagely_by_circle(*args)
        case "CONSISTENT_HASH":
            out = allocate_consistent_hash(*args, virtual_nodes=case["virtualNodes"])
        case _:
            out = allocate_by_machine_room(*args, set(case["idcs"]))
    return [[m.topic, m.broker_name, m.queue_id] for m in out]


def test_python_strategies_equal_rocketmqs_on_random_cases(rocketmq_jars):
    rng = random.Random(20240607)
    cases = [random_case(rng) for _ in range(600)]
    cmd = java_client_command([], main="ferrymq.compat.AllocationOracle")
    proc = subprocess.run(cmd, input="".join(json.dumps(c) + "\n" for c in cases), capture_output=True, text=True,
                          timeout=120)
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(cases), proc.stderr[-2000:]
    mismatches = [(c, a, python_share(c)) for c, a in zip(cases, answers) if a.get("result") != python_share(c)]
    assert not mismatches, mismatches[:3]
