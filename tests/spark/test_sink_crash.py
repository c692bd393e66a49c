"""The sink's exactly-once promise across a crash: a streaming query's driver (a process of its
own, Spark local mode: the executors die with it) killed -9 in the middle of its batches, then
started again from its checkpoint, leaves every row in the topic exactly once.

Rows: FERRYMQ_SINK_CRASH_ROWS (default 40 000, in 8 files: 8 micro-batches). Issue 34 asks for
1 000 000: run by hand with the variable set and a longer timeout (``--timeout 3000``); it took
680 s on 2 cores (docs/spark.md#writing-to-a-topic)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ferrymq_spark.sink_options import DEFAULT_COMMIT_TOPIC
from tests.consumer_support import read_all
from testkit.spark import create_topic
from testkit.wait import poll_until

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

DRIVER = Path(__file__).with_name("sink_driver.py")
ROWS = int(os.environ.get("FERRYMQ_SINK_CRASH_ROWS", "40000"))
FILES = 8


def driver(namesrv: str, source: Path, checkpoint: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(DRIVER), namesrv, str(source), str(checkpoint), "SinkCrash"],
                            stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)


def batches(checkpoint: Path, log_name: str) -> set[int]:
    d = checkpoint / log_name
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def in_flight(checkpoint: Path) -> set[int]:
    return batches(checkpoint, "offsets") - batches(checkpoint, "commits")


def test_a_driver_killed_mid_batch_and_restarted_leaves_every_row_exactly_once(broker_process, tmp_path):
    namesrv = broker_process.namesrv_addr
    for topic in ("SinkCrash", DEFAULT_COMMIT_TOPIC):
        asyncio.run(create_topic(namesrv, topic, 4))
    source, checkpoint, log = tmp_path / "source", tmp_path / "checkpoint", tmp_path / "driver.log"
    source.mkdir()
    per_file = ROWS // FILES
    for f in range(FILES):
        rows = range(f * per_file, (f + 1) * per_file)
        (source / f"part-{f:03d}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in rows))

    first = driver(namesrv, source, checkpoint, log)
    # Killed once two batches are in and the third is on its way (in Spark's offset log, not in
    # its commit log): some of its rows are stored as half messages, or being committed; where
    # exactly is left to chance, with a random wait.
    poll_until("two batches written and a third under way",
               lambda: len(batches(checkpoint, "commits")) >= 2 and in_flight(checkpoint) or first.poll() is not None,
               600, 0.1)
    time.sleep(random.uniform(0.0, 1.5))
    assert first.poll() is None, f"the driver ended before it was killed:\n{log.read_text()[-3000:]}"
    os.killpg(first.pid, signal.SIGKILL)  # the driver and its Python workers
    first.wait(30)
    print(f"killed with batches {sorted(in_flight(checkpoint))} under way, {len(batches(checkpoint, 'commits'))} done")

    second = driver(namesrv, source, checkpoint, log)
    assert second.wait(1800) == 0, f"the restarted query failed:\n{log.read_text()[-5000:]}"

    got = Counter(m.keys[0] for m in asyncio.run(read_all(namesrv, "SinkCrash", group="crash-check")))
    expected = Counter(f"row-{i}" for i in range(per_file * FILES))
    missing = expected - got
    twice = {k: n for k, n in got.items() if n > 1}
    assert not missing and not twice, (f"{len(missing)} rows missing (e.g. {sorted(missing)[:5]}), "
                                       f"{len(twice)} written more than once (e.g. {sorted(twice)[:5]})")
