"""spark-jobs/jobs/consume_to_parquet.py as users run it: a separate process, local[2]."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferrymq_spark.jvm_reader import jar_path

from testkit.spark import create_topic, produce
from tests.spark.test_batch_read import _committed
from testkit.processes import REPO

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB = REPO / "spark-jobs" / "jobs" / "consume_to_parquet.py"


def run_job(namesrv: str, output, *extra: str, spark_submit: bool = False, timeout: float = 240) -> subprocess.CompletedProcess:
    """The job as ``python job.py --master local[2]``, or as the CronJob runs it: ``spark-submit
    --deploy-mode client`` with a ``local:`` application path (here with a local master). Either
    way with the JVM reader's jar on the classpath, as the Spark image has it in $SPARK_HOME/jars."""
    job_args = ["--namesrv", namesrv, "--group", "drainer", "--topics", "SparkDrain", "--output", str(output), *extra]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if spark_submit:
        cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--deploy-mode", "client",
               "--conf", "spark.sql.session.timeZone=UTC", "--jars", str(jar_path()), f"local://{JOB}", *job_args]
    else:
        cmd = [sys.executable, str(JOB), "--master", "local[2]", *job_args]
        env["PYSPARK_SUBMIT_ARGS"] = f"--jars {jar_path()} pyspark-shell"  # what pyspark's gateway launch reads
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_rerun_after_a_crash_between_write_and_commit_duplicates_nothing(spark, broker_process, tmp_path):
    namesrv, output = broker_process.namesrv_addr, tmp_path / "lake"
    asyncio.run(create_topic(namesrv, "SparkDrain", 4))
    first = asyncio.run(produce(namesrv, "SparkDrain", 1500, queues=4, batch=50, seed=21))

    crashed = run_job(namesrv, output, "--crash-after-write")
    assert crashed.returncode == -9, crashed.stderr[-5000:]  # killed after writing, before committing
    assert "1500 messages in 4 ranges with the JVM reader" in crashed.stderr
    [run_dir] = [p for p in output.iterdir() if p.name.startswith("run=")]
    assert (run_dir / "_SUCCESS").exists()
    # Nothing committed (a group without offsets reads as 0 while the queue starts at 0, as in RocketMQ).
    assert set(asyncio.run(_committed(namesrv, "drainer", "SparkDrain", 4)).values()) <= {-1, 0}

    second = asyncio.run(produce(namesrv, "SparkDrain", 600, queues=4, batch=50, seed=22))  # arrives meanwhile
    resumed_run = run_job(namesrv, output, spark_submit=True)
    result = summary(resumed_run)
    assert "600 messages in 4 ranges with the JVM reader" in resumed_run.stdout + resumed_run.stderr
    resumed, fresh = result["runs"]
    assert resumed["path"].endswith(run_dir.name) and resumed["resumed"] and not resumed["written"]
    assert (resumed["messages"], fresh["messages"], result["messages"]) == (1500, 600, 2100)

    rows = spark.read.parquet(str(output)).select("msgId", "run", "date", "queueId", "queueOffset").collect()
    assert len(rows) == 2100
    assert sorted(r.msgId for r in rows) == sorted(s.msg_id for s in first + second)
    assert {r.run for r in rows} == {resumed["runId"], fresh["runId"]}
    assert all(len(str(r.date)) == 10 for r in rows)  # yyyy-MM-dd partitions
    ends = {q: max(s.queue_offset for s in first + second if s.queue_id == q) + 1 for q in range(4)}
    assert asyncio.run(_committed(namesrv, "drainer", "SparkDrain", 4)) == ends

    again = summary(run_job(namesrv, output))  # nothing new: nothing written, nothing committed
    assert again["runs"] == [] and again["messages"] == 0
    assert spark.read.parquet(str(output)).count() == 2100


def test_bad_arguments_fail_with_one_clear_line(tmp_path):
    proc = subprocess.run([sys.executable, str(JOB), "--group", "g", "--topics", "T", "--output", str(tmp_path),
                           "--namesrv", "127.0.0.1:1", "--set", "noSuchSetting=1"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].lower().startswith("consume_to_parquet: unknown option ferrymq.nosuchsetting")
