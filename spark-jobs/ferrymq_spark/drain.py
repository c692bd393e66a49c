"""Drain a consumer group's backlog into Parquet, so that a re-run after any failure neither
loses nor duplicates messages.

A run reads fixed offset ranges (the group's committed offsets up to the queues' ends at
planning time) and writes them to ``<output>/run=<id>/date=YYYY-MM-DD/``, where ``<id>`` is
derived from the ranges. Before writing, the run's manifest (group, start and end offsets)
is stored under ``<output>/_ferrymq_runs/<group>/``; after Spark's job commit it commits the
end offsets to the group. If the process dies between the write and the commit, the next run
finds the group still at that manifest's start offsets: it re-uses the manifest's end offsets
(not the queues' new ends), hence the same id and path, skips the write when ``_SUCCESS`` is
there (or overwrites a partial one), commits, and only then plans a new run for what arrived
since. ``spark.read.parquet(output)`` sees each message once (``_ferrymq_runs`` is hidden
from Spark by its leading underscore).

Files are handled through Hadoop's FileSystem API, so ``output`` may be any Hadoop path
(local, ``hdfs://``, ``s3a://``) that the Spark session can write.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass, field

from ferrymq_spark.jvm_reader import read_plan
from ferrymq_spark.offsets import Offsets, offsets_from_json, offsets_to_json, ranges_between, run_id
from ferrymq_spark.options import SourceOptions
from ferrymq_spark.planning import BatchPlan, open_client, plan_with

log = logging.getLogger(__name__)

RUNS_DIR = "_ferrymq_runs"


@dataclass
class RunManifest:
    group: str
    start: Offsets
    end: Offsets
    state: str = "planned"  # planned -> committed

    @property
    def run_id(self) -> str:
        return run_id(ranges_between(self.start, self.end))

    def to_json(self) -> str:
        return json.dumps({"group": self.group, "runId": self.run_id, "state": self.state,
                           "start": offsets_to_json(self.start), "end": offsets_to_json(self.end)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "RunManifest":
        d = json.loads(text)
        return cls(d["group"], offsets_from_json(d["start"]), offsets_from_json(d["end"]), d.get("state", "planned"))


def find_pending(manifests: list[RunManifest], group: str, start: Offsets) -> RunManifest | None:
    """The run a failed drain left behind: planned from exactly the group's current offsets
    and never committed. (A committed run's start is behind the group's offsets.)"""
    for m in manifests:
        if m.group == group and m.state != "committed" and m.start == start:
            return m
    return None


class HadoopFiles:
    """The few file operations the drain needs, on Spark's Hadoop FileSystem."""

    def __init__(self, spark) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, path: str):
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p, p.getFileSystem(self._conf)

    def exists(self, path: str) -> bool:
        p, fs = self._path(path)
        return bool(fs.exists(p))

    def list(self, directory: str) -> list[str]:
        p, fs = self._path(directory)
        if not fs.exists(p):
            return []
        return sorted(str(s.getPath().toString()) for s in fs.listStatus(p))

    def read_text(self, path: str) -> str:
        p, fs = self._path(path)
        stream = fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
        finally:
            stream.close()

    def write_text_atomically(self, path: str, text: str) -> None:
        """Write beside, then rename over: a reader sees the old or the new file, never half."""
        p, fs = self._path(path)
        tmp = self._jvm.org.apache.hadoop.fs.Path(path + ".tmp")
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if fs.exists(p):
            fs.delete(p, False)
        if not fs.rename(tmp, p):
            raise OSError(f"could not rename {tmp} to {path}")


@dataclass
class RunResult:
    run_id: str
    path: str
    messages: int
    resumed: bool
    written: bool
    ranges: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"runId": self.run_id, "path": self.path, "messages": self.messages, "resumed": self.resumed,
                "written": self.written, "ranges": self.ranges}


def drain(spark, opts: SourceOptions, output: str, *, crash_after_write: bool = False) -> dict:
    """Drain the group's backlog for ``opts.topics`` into ``output``; returns a summary."""
    from pyspark.sql import functions as F

    files = HadoopFiles(spark)
    output = output.rstrip("/")
    runs_dir = f"{output}/{RUNS_DIR}/{opts.consumer_group}"
    results: list[RunResult] = []
    fresh_run_done = False
    with open_client(opts) as client:
        while True:
            plan = plan_with(client, opts)
            manifests = [RunManifest.from_json(files.read_text(f)) for f in files.list(runs_dir) if f.endswith(".json")]
            pending = find_pending(manifests, opts.consumer_group, plan.start)
            if pending is not None:
                plan = BatchPlan(opts, pending.start, pending.end)
            elif plan.message_count == 0 or fresh_run_done:
                break  # nothing left, or the backlog as of this invocation is drained
            fresh_run_done = fresh_run_done or pending is None
            manifest = pending or RunManifest(opts.consumer_group, plan.start, plan.end)
            rid = manifest.run_id
            path = f"{output}/run={rid}"
            if pending is None:
                files.write_text_atomically(f"{runs_dir}/{rid}.json", manifest.to_json())

            written = files.exists(f"{path}/_SUCCESS")
            if not written:  # first attempt, or a partial write by a run that died: (over)write
                df = read_plan(spark, plan, client)  # the JVM reader where the session has it
                (df.withColumn("date", F.date_format("storeTimestamp", "yyyy-MM-dd"))
                   .write.mode("overwrite").partitionBy("date").parquet(path))
            if crash_after_write:  # fault injection for tests: die like a killed driver would
                os.kill(os.getpid(), signal.SIGKILL)

            client.commit_offsets(plan.end)  # only now: the output is durably written
            manifest.state = "committed"
            files.write_text_atomically(f"{runs_dir}/{rid}.json", manifest.to_json())
            results.append(RunResult(rid, path, plan.message_count, pending is not None, not written,
                                     [r.to_dict() for r in plan.ranges()]))
            log.info("run %s: %d messages in %s%s", rid, plan.message_count, path, " (resumed)" if pending else "")
    return {
        "group": opts.consumer_group,
        "topics": list(opts.topics),
        "output": output,
        "runs": [r.to_dict() for r in results],
        "messages": sum(r.messages for r in results),
        # The last plan started at the group's offsets, where every committed run ended.
        "committed": offsets_to_json(plan.start),
    }
