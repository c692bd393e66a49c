"""RocketMQ 5 (gRPC) clients as peers: the official Java client
(``org.apache.rocketmq:rocketmq-client-java`` from Maven Central) and Node.js client
(``rocketmq-client-nodejs`` from npm) as scriptable peers, cached under ``<repo>/.cache/``:

* ``.cache/rocketmq-client-java-5/lib``  the Java client jar (shaded), by Maven
* ``.cache/compat-java5/classes``        ``tests/compat/java5/src/main/java`` compiled by javac
* ``.cache/node-rocketmq5``              ``tests/compat/node5`` with its npm install

Both programs print one JSON event per line; :func:`run_grpc_java` and :func:`run_grpc_node`
return them as :class:`JavaEvents`. Unreachable registries raise :class:`CompatUnavailable`
(the tests turn that into a skip, or a failure under ``CI=true``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from testkit.java_client import (CACHE_DIR, MAVEN_REPO, REPO_ROOT, CompatError, CompatUnavailable, JavaClientError,
                                 JavaEvents, maven_lock, run_to_end, session_dir)
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

__all__ = ["JAVA5_VERSION", "ensure_java5_classes", "ensure_node5", "grpc_standalone", "parse_events",
           "run_grpc_java", "run_grpc_node", "running_grpc_standalone", "unique_names"]

JAVA5_VERSION = "5.2.0"  # in tests/compat/java5/pom.xml
HERE = REPO_ROOT / "tests" / "compat"  # the client programs' sources
JAVA5_PROJECT = HERE / "java5"
JAVA5_LIB = CACHE_DIR / "rocketmq-client-java-5" / "lib"
JAVA5_CLASSES = CACHE_DIR / "compat-java5" / "classes"
NODE5_PROJECT = HERE / "node5"
NODE5_DIR = CACHE_DIR / "node-rocketmq5"
DEPENDENCY_PLUGIN = "3.6.1"
GRPC5_MAIN = "ferrymq.compat5.Grpc5"
JVM_OPTS = ("-Xms32m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")
_NETWORK_HINTS = ("Could not transfer", "Could not resolve", "UnknownHost", "Connection refused", "timed out",
                  "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "network")
_lock = threading.Lock()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise CompatError(f"compat: `{name}` is not on PATH (the gRPC compat tests need a JDK 17, Maven and npm)")
    return path


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.name).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


class _FileLock:
    def __init__(self, name: str) -> None:
        self.path = CACHE_DIR / "locks" / name

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a+")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def _run_fetch(cmd: list[str], cwd: Path, what: str, timeout: float) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompatUnavailable(f"{what} took more than {timeout:.0f}s") from None
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        network = [ln for ln in output.splitlines() if any(h in ln for h in _NETWORK_HINTS)]
        if network:
            raise CompatUnavailable(f"{what}: {network[0].strip()[:300]}")
        raise CompatError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{output[-4000:]}")


def ensure_java5_classes(timeout: float = 270) -> str:
    """The classpath of our Java 5 program and the client jar (resolved and compiled once)."""
    pom = JAVA5_PROJECT / "pom.xml"
    sources = sorted((JAVA5_PROJECT / "src" / "main" / "java").rglob("*.java"))
    with _lock, _FileLock("java5.lock"):
        stamp = JAVA5_LIB / ".stamp"
        want = _digest(pom)
        if not (stamp.is_file() and stamp.read_text().strip() == want):
            staging = JAVA5_LIB.with_name("lib.partial")
            shutil.rmtree(staging, ignore_errors=True)
            with maven_lock():
                _run_fetch([_tool("mvn"), "-q", "-B", "-f", str(pom), f"-Dmaven.repo.local={MAVEN_REPO}",
                            f"org.apache.maven.plugins:maven-dependency-plugin:{DEPENDENCY_PLUGIN}:copy-dependencies",
                            "-DincludeScope=runtime", f"-DoutputDirectory={staging}"],
                           JAVA5_PROJECT, "resolving rocketmq-client-java with Maven", timeout)
            if not list(staging.glob("rocketmq-client-java-*.jar")):
                raise CompatError(f"Maven succeeded but {staging} holds no rocketmq-client-java jar")
            shutil.rmtree(JAVA5_LIB, ignore_errors=True)
            staging.rename(JAVA5_LIB)
            stamp.write_text(want + "\n")
        stamp = JAVA5_CLASSES / ".stamp"
        want = _digest(pom, *sources)
        if not (stamp.is_file() and stamp.read_text().strip() == want):
            staging = JAVA5_CLASSES.with_name("classes.partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            proc = subprocess.run([_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(staging),
                                   "-cp", str(JAVA5_LIB / "*"), *map(str, sources)],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise CompatError(f"javac failed:\n{proc.stdout}{proc.stderr}")
            shutil.rmtree(JAVA5_CLASSES, ignore_errors=True)
            staging.rename(JAVA5_CLASSES)
            stamp.write_text(want + "\n")
    return os.pathsep.join([str(JAVA5_CLASSES), str(JAVA5_LIB / "*")])


def ensure_node5(timeout: float = 270) -> Path:
    """``tests/compat/node5`` installed with npm under .cache (once per package.json)."""
    package = NODE5_PROJECT / "package.json"
    with _lock, _FileLock("node5.lock"):
        stamp = NODE5_DIR / ".stamp"
        want = _digest(package, *sorted(NODE5_PROJECT.glob("*.js")))
        if not (stamp.is_file() and stamp.read_text().strip() == want):
            NODE5_DIR.mkdir(parents=True, exist_ok=True)
            for f in [package, *NODE5_PROJECT.glob("*.js")]:
                shutil.copy2(f, NODE5_DIR / f.name)
            _run_fetch([_tool("npm"), "install", "--no-audit", "--no-fund", "--loglevel=error"], NODE5_DIR,
                       "installing rocketmq-client-nodejs with npm", timeout)
            stamp.write_text(want + "\n")
    return NODE5_DIR


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


def run_grpc_java(mode: str, timeout: float = 120, check: bool = True, **options) -> JavaEvents:
    """Run ``ferrymq.compat5.Grpc5 <mode> key=value...`` (see the Java file for the modes)."""
    cp = ensure_java5_classes()
    home = session_dir() / "java5-home"  # the client writes ~/logs/rocketmq/rocketmq-client.log
    cmd = [_tool("java"), *JVM_OPTS, f"-Duser.home={home}", "-cp", cp, GRPC5_MAIN, mode,
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
