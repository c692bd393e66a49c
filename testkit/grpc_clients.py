"""RocketMQ 5 (gRPC) clients as peers: the official Java client
(``org.apache.rocketmq:rocketmq-client-java`` from Maven Central) and Node.js client
(``rocketmq-client-nodejs`` from npm) as scriptable peers, built once per machine
(:mod:`testkit.build_cache`, under ``~/.cache/ferrymq-k8s/builds``):

* ``rocketmq-client-java5-lib-<key>``  the Java client jar (shaded), by Maven
* ``compat-classes-java5-<key>``       ``tests/compat/java5/src/main/java`` compiled by javac
* ``node-rocketmq5-<key>``             ``tests/compat/node5`` with its npm install

Both programs print one JSON event per line; :func:`run_grpc_java` and :func:`run_grpc_node`
return them as :class:`JavaEvents`. Unreachable registries raise :class:`CompatUnavailable`
(the tests turn that into a skip, or a failure under ``CI=true``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from pathlib import Path

from testkit import build_cache
from testkit.java_client import (REPO_ROOT, CompatError, CompatUnavailable, JavaClientError, JavaEvents, compile_java,
                                 copy_dependencies, run_to_end, session_dir)
from testkit.npm import ensure_npm_project
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

__all__ = ["JAVA5_VERSION", "ensure_java5_classes", "ensure_node5", "java5_dirs", "grpc_standalone", "parse_events",
           "run_grpc_java", "run_grpc_node", "running_grpc_standalone", "unique_names"]

JAVA5_VERSION = "5.2.0"  # in tests/compat/java5/pom.xml
HERE = REPO_ROOT / "tests" / "compat"  # the client programs' sources
JAVA5_PROJECT = HERE / "java5"
NODE5_PROJECT = HERE / "node5"
GRPC5_MAIN = "ferrymq.compat5.Grpc5"
JVM_OPTS = ("-Xms32m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise CompatError(f"compat: `{name}` is not on PATH (the gRPC compat tests need a JDK 17, Maven and npm)")
    return path


def java5_dirs(timeout: float = 270) -> tuple[Path, Path]:
    """Our Java 5 program's classes and the client's jars (resolved and compiled once per machine)."""
    pom = JAVA5_PROJECT / "pom.xml"
    sources = sorted((JAVA5_PROJECT / "src" / "main" / "java").rglob("*.java"))
    lib = build_cache.cached(
        "rocketmq-client-java5-lib", build_cache.digest([pom], JAVA5_PROJECT),
        lambda out: _copy_client_jars(pom, out, timeout))
    classes = build_cache.cached(
        "compat-classes-java5", build_cache.digest([pom, *sources], JAVA5_PROJECT, lib.name),
        lambda out: compile_java(sources, str(lib / "*"), out))
    return classes, lib


def _copy_client_jars(pom: Path, out: Path, timeout: float) -> None:
    copy_dependencies(pom, out, what="resolving rocketmq-client-java with Maven", timeout=timeout)
    if not list(out.glob("rocketmq-client-java-*.jar")):
        raise CompatError(f"Maven succeeded but {out} holds no rocketmq-client-java jar")


def ensure_java5_classes(timeout: float = 270) -> str:
    """The classpath of our Java 5 program and the client jar (resolved and compiled once)."""
    classes, lib = java5_dirs(timeout)
    return os.pathsep.join([str(classes), str(lib / "*")])


def ensure_node5(timeout: float = 270) -> Path:
    """``tests/compat/node5`` installed with npm, once per machine for its ``package.json`` and scripts."""
    return ensure_npm_project("node-rocketmq5", NODE5_PROJECT, timeout=timeout)


def _run(cmd: list[str], what: str, timeout: float, check: bool, env: dict | None = None) -> JavaEvents:
    run = run_to_end(cmd, timeout, env=env)
    out, err = run.out, run.err
    events = JavaEvents(parse_events(out))
    events.returncode = run.returncode
    events.stderr = err
    events.elapsed = run.elapsed
    if run.timed_out or (check and run.returncode != 0):
        why = f"timed out after {timeout:.0f}s" if run.timed_out else f"exited {run.returncode}"
        report = (f"compat: {what} {why}: {' '.join(cmd[-6:])}\n--- stderr ---\n{err[-4000:]}\n"
                  "--- stdout (last 30 lines) ---\n" + "\n".join(out.splitlines()[-30:]))
        print(report, file=sys.stderr)
        raise JavaClientError(report[:3000], events)
    return events


def parse_events(stdout: str) -> list[dict]:
    import json
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "event" in obj:
                events.append(obj)
    return events


def run_grpc_java(mode: str, timeout: float = 120, check: bool = True, jvm_args: tuple[str, ...] = (),
                  **options) -> JavaEvents:
    """Run ``ferrymq.compat5.Grpc5 <mode> key=value...`` (see the Java file for the modes);
    ``jvm_args`` after the defaults (a benchmark's load generator: full JIT, a bigger heap)."""
    cp = ensure_java5_classes()
    home = session_dir() / "java5-home"  # the client writes ~/logs/rocketmq/rocketmq-client.log
    cmd = [_tool("java"), *JVM_OPTS, *jvm_args, f"-Duser.home={home}", "-cp", cp, GRPC5_MAIN, mode,
           *(f"{k}={v}" for k, v in options.items())]
    return _run(cmd, f"Java 5 client {mode}", timeout, check)


def run_grpc_node(mode: str, timeout: float = 120, check: bool = True, **options) -> JavaEvents:
    """Run ``tests/compat/node5/grpc5.js <mode> key=value...`` with the npm client."""
    directory = ensure_node5()
    cmd = [_tool("node"), str(directory / "grpc5.js"), mode, *(f"{k}={v}" for k, v in options.items())]
    home = session_dir() / "node5-home"
    home.mkdir(parents=True, exist_ok=True)
    return _run(cmd, f"Node.js client {mode}", timeout, check, env={**os.environ, "HOME": str(home)})



def grpc_standalone(data_dir: Path, *settings: str):
    """``ferrymq standalone`` with the gRPC endpoint on a free port: (process, "127.0.0.1:port")."""
    port = free_port()
    server = StandaloneProcess(data_dir, settings=[f"grpcListenPort={port}", *settings]).start()
    return server, f"127.0.0.1:{port}"


@contextlib.contextmanager
def running_grpc_standalone(data_dir: Path, *settings: str):
    """grpc_standalone for a fixture: stopped at the end, which must be a clean shutdown."""
    server, endpoint = grpc_standalone(data_dir, *settings)
    try:
        yield server, endpoint
    finally:
        code = server.stop()
        assert code == 0, f"standalone did not shut down cleanly ({code}):\n{server.log()}"


def unique_names(prefix: str) -> tuple[str, str]:
    """A topic and a consumer group of this test's own."""
    suffix = uuid.uuid4().hex[:8]
    return f"{prefix}_{suffix}", f"G{prefix}_{suffix}"
