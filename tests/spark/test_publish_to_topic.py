"""spark-jobs/jobs/publish_to_topic.py as the Topic's CronJob runs it: a separate process,
local[2]. A run publishes the files that arrived since the last one, every row once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from ferrymq_spark.sink_options import DEFAULT_COMMIT_TOPIC
from tests.consumer_support import read_all
from testkit.processes import REPO
from testkit.spark import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB = REPO / "spark-jobs" / "jobs" / "publish_to_topic.py"


def publish(namesrv: str, source, checkpoint, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, str(JOB), "--master", "local[2]", "--namesrv", namesrv, "--topic", "Outbox",
                           "--input", str(source), "--format", "json", "--checkpoint", str(checkpoint), *extra],
                          capture_output=True, text=True, timeout=240, cwd=REPO,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def write_file(source, name: str, ids: range) -> None:
    (source / name).write_text("".join(json.dumps({"order": i, "item": "tea", "region": f"r{i % 3}"}) + "\n"
                                       for i in ids))


@pytest.mark.slow  # four Spark runs: 150-290 s alone, past the suite's 300 s beside other modules (make test-slow)
@pytest.mark.timeout(900)
def test_each_run_publishes_the_new_files_rows_once_with_keys_and_tags(broker_process, tmp_path):
    namesrv = broker_process.namesrv_addr
    for topic in ("Outbox", DEFAULT_COMMIT_TOPIC):
        asyncio.run(create_topic(namesrv, topic, 2))
    source, checkpoint = tmp_path / "outbox", tmp_path / "checkpoint"
    source.mkdir()
    args = ("--keys", "CONCAT('order-', order)", "--tags", "region", "--max-files-per-batch", "1")

    assert publish(namesrv, source, checkpoint, *args)["rows"] == 0  # nothing there yet: nothing to do
    write_file(source, "a.json", range(0, 300))
    write_file(source, "b.json", range(300, 500))
    assert publish(namesrv, source, checkpoint, *args) == {"topic": "Outbox", "batches": 2, "rows": 500}
    assert publish(namesrv, source, checkpoint, *args)["rows"] == 0  # already published
    write_file(source, "c.json", range(500, 650))
    assert publish(namesrv, source, checkpoint, *args) == {"topic": "Outbox", "batches": 1, "rows": 150}

    messages = asyncio.run(read_all(namesrv, "Outbox", group="outbox-check"))
    assert Counter(m.keys[0] for m in messages) == Counter(f"order-{i}" for i in range(650)), "every row once"
    m = next(m for m in messages if m.keys == ["order-7"])
    assert json.loads(m.body) == {"order": 7, "item": "tea", "region": "r1"} and m.tags == "r1"


def test_bad_arguments_are_refused_before_spark_starts(tmp_path):
    proc = subprocess.run([sys.executable, str(JOB), "--topic", "Outbox", "--input", str(tmp_path),
                           "--checkpoint", str(tmp_path / "c"), "--format", "avro"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "NAMESRV_ADDR": "x:1"})
    assert proc.returncode == 2 and "invalid choice: 'avro'" in proc.stderr
