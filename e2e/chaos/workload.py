"""The fault-injection suite's workload as local processes: the official RocketMQ 4.9.7 Java
client's producer and push consumer (tests/compat/java/src/main/java/ferrymq/chaos/), each
writing its history file (e2e/chaos/history.py).

The jars and the compiled programs come from the compatibility harness (testkit/java_client.py:
Maven Central into .cache/, javac); nothing here downloads or builds on its own.

    p = start_producer(namesrv, "T", tmp / "producer.jsonl", rate=50)
    c = start_consumer(namesrv, "T", "G", tmp / "consumer.jsonl")
    ...
    p.stop(); c.stop()     # SIGTERM: in-flight sends finish, files flushed
    result = check(load(p.history, c.history))
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from testkit.java_client import _pdeathsig, java_client_command

if TYPE_CHECKING:
    from e2e.chaos.checker import Result
    from e2e.chaos.history import History

PRODUCER_MAIN = "ferrymq.chaos.ChaosProducer"
CONSUMER_MAIN = "ferrymq.chaos.ChaosConsumer"
# the 5.x gRPC client's PushConsumer (tests/compat/java5, testkit/grpc_clients.py): its own classpath
GRPC_CONSUMER_MAIN = "ferrymq.compat5.ChaosGrpcConsumer"


class JavaWorkload:
    """One Java workload process: its history file and its log (stdout+stderr: progress lines)."""

    def __init__(self, main: str, args: list[str], history: Path, log: Path) -> None:
        self.main, self.args, self.history, self.log_path = main, args, Path(history), Path(log)
        self.proc: subprocess.Popen | None = None

    def start(self) -> "JavaWorkload":
        cmd = java_client_command(self.args, main=self.main)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_pdeathsig)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (the program finishes what is in flight and flushes), SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def events(self, event: str | None = None) -> list[dict]:
        """The JSON progress lines of the log (``event``: only those)."""
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    obj = json.loads(line)
                    if event is None or obj.get("event") == event:
                        out.append(obj)
        return out

    def ready(self) -> bool:
        """The consumer said it started (the producer writes its first line)."""
        return bool(self.events("ready")) or self.history.exists() and self.history.stat().st_size > 0


def producer_args(namesrv: str, topic: str, out: str, *, rate: float = 50, threads: int = 2,
                  duration_s: float = 3600, key_prefix: str | None = None, send_timeout_ms: int = 3000,
                  body_size: int = 128, retries: int = 0, group: str = "chaos_producer",
                  instance: str | None = None, poll_namesrv_ms: int = 1000) -> list[str]:
    """ChaosProducer's arguments (``out``: its history file, or ``-`` for stdout)."""
    args = ["--namesrv", namesrv, "--topic", topic, "--out", out, "--rate", str(rate),
            "--threads", str(threads), "--duration-ms", str(int(duration_s * 1000)),
            "--send-timeout-ms", str(send_timeout_ms), "--body-size", str(body_size), "--retries", str(retries),
            "--group", group, "--poll-namesrv-ms", str(poll_namesrv_ms),
            "--instance", instance or f"producer-{os.getpid()}-{time.monotonic_ns() % 10**6}"]
    return args + (["--key-prefix", key_prefix] if key_prefix else [])


def consumer_args(namesrv: str, topic: str, group: str, out: str, *, idle_s: float = 0, max_s: float = 3600,
                  threads: int = 1, instance: str | None = None, poll_namesrv_ms: int = 1000) -> list[str]:
    """ChaosConsumer's arguments (``out``: its history file, or ``-`` for stdout)."""
    return ["--namesrv", namesrv, "--topic", topic, "--group", group, "--out", out,
            "--idle-ms", str(int(idle_s * 1000)), "--max-ms", str(int(max_s * 1000)), "--threads", str(threads),
            "--poll-namesrv-ms", str(poll_namesrv_ms),
            "--instance", instance or f"consumer-{os.getpid()}-{time.monotonic_ns() % 10**6}"]


def grpc_consumer_args(endpoints: str, topic: str, group: str, *, threads: int = 1,
                       instance: str | None = None) -> list[str]:
    """ChaosGrpcConsumer's arguments (its history always on stdout)."""
    return [f"endpoints={endpoints}", f"topic={topic}", f"group={group}", f"threads={threads}",
            f"instance={instance or f'grpc-consumer-{os.getpid()}'}"]


def grpc_reads(lines: list[str], group: str, topic: str) -> list[str]:
    """ChaosGrpcConsumer's history lines with each read's queue id taken from its receipt handle:
    the 5.x client shows only the queue it received from, which for a normal group on FerryMQ is
    a whole broker (-1). The handle is decoded by the broker's own codec; a read whose handle does
    not decode keeps -1 (and then shows up as misplaced)."""
    from ferrymq.broker.pop import receipt

    out = []
    for line in lines:
        try:
            obj = json.loads(line)
            decoded = receipt.decode(obj.get("handle") or "", group, topic) if obj.get("op") == "recv" else None
        except (ValueError, AttributeError):
            out.append(line)  # the history reader skips and counts what does not parse
            continue
        if decoded is not None:
            obj["queue"] = decoded.queue_id
            line = json.dumps(obj)
        out.append(line)
    return out


def start_producer(namesrv: str, topic: str, history: Path, **options) -> JavaWorkload:
    """ChaosProducer as a local process (``options``: those of :func:`producer_args`)."""
    history = Path(history)
    return JavaWorkload(PRODUCER_MAIN, producer_args(namesrv, topic, str(history), **options), history,
                        history.with_suffix(".log")).start()


def start_consumer(namesrv: str, topic: str, group: str, history: Path, **options) -> JavaWorkload:
    """ChaosConsumer as a local process (``options``: those of :func:`consumer_args`)."""
    history = Path(history)
    return JavaWorkload(CONSUMER_MAIN, consumer_args(namesrv, topic, group, str(history), **options), history,
                        history.with_suffix(".log")).start()


def drain(producer: JavaWorkload, consumer: JavaWorkload, timeout: float = 90, quiet: float = 20) -> bool:
    """Once the producer stopped: wait until the consumer read every acknowledged key (True), or
    read nothing new for ``quiet`` s (what is missing is not coming: a loss), or ``timeout`` s."""
    from e2e.chaos.history import load

    return drained(lambda: load(producer.history, consumer.history), timeout, quiet)


def drained(history: Callable[[], "History"], timeout: float = 90, quiet: float = 20,
            interval: float = 0.5) -> bool:
    """Wait until ``history()`` (the producers' sends and one consumer's reads, read again at each
    look) has every acknowledged key read (True), or its reads stopped growing for ``quiet`` s,
    or ``timeout`` s passed (False)."""
    from e2e.chaos.checker import check

    deadline = time.monotonic() + timeout
    reads, changed = -1, time.monotonic()
    while time.monotonic() < deadline:
        h = history()
        r = check(h)
        if not (r.lost or r.unseen):
            return True
        if len(h.reads) != reads:
            reads, changed = len(h.reads), time.monotonic()
        elif time.monotonic() - changed > quiet:
            return False
        time.sleep(interval)  # polling the consumer's output
    return False


class AckFollower:
    """Follows a producer's growing history file: when each acknowledgement was answered."""

    def __init__(self, history: Path) -> None:
        self.history, self._pos, self.ack_times = Path(history), 0, []

    def poll(self) -> "AckFollower":
        from e2e.chaos.history import parse_lines
        if not self.history.exists():
            return self
        with open(self.history, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self._pos += len(complete)
        self.ack_times += sorted(s.t1 for s in parse_lines(complete.decode(errors="replace").splitlines()).sends
                                 if s.acked)
        return self

    def count(self, since: float = 0.0) -> int:
        """Acknowledgements answered after ``since`` (s since the epoch)."""
        self.poll()
        return sum(1 for t in self.ack_times if t > since)


def run(namesrv: str, topic: str, out_dir: Path, *, seconds: float, rate: float = 50, threads: int = 2,
        group: str | None = None, drain_s: float = 60, fault: str = "") -> "Result":
    """Produce for ``seconds`` while a consumer reads, let the consumer drain (every acknowledged
    key read, or ``drain_s`` passed), stop it and check the history (for a fault injected by hand
    meanwhile)."""
    from e2e.chaos.checker import check
    from e2e.chaos.history import load

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    consumer = start_consumer(namesrv, topic, group or f"{topic}_chaos", out_dir / "consumer.jsonl")
    producer = None
    try:
        deadline = time.monotonic() + 60
        while not consumer.ready() and time.monotonic() < deadline:
            time.sleep(0.2)  # polling another process's output
        producer = start_producer(namesrv, topic, out_dir / "producer.jsonl", rate=rate, threads=threads,
                                  duration_s=seconds)
        producer.wait(seconds + 120)
        drain(producer, consumer, drain_s)
    finally:
        if producer is not None:
            producer.stop()
        consumer.stop()
    return check(load(producer.history, consumer.history), fault=fault)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from e2e.chaos.checker import report, table

    ap = argparse.ArgumentParser(prog="python -m e2e.chaos.workload",
                                 description="Run the Java workload against a name server and check its history.")
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--dir", required=True, help="where the history files and logs go")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", default=None)
    ap.add_argument("--fault", default="")
    args = ap.parse_args(argv)
    result = run(args.namesrv, args.topic, Path(args.dir), seconds=args.seconds, rate=args.rate,
                 threads=args.threads, group=args.group, fault=args.fault)
    print(report(result))
    print()
    print(table([result]))
    return 0 if result.valid else 1


if __name__ == "__main__":
    import sys
    sys.exit(main())
