"""The official Apache RocketMQ Java toolchains as peers: the jars, the client programs and
``mqadmin``. Two versions, each a Maven project of its own and a classpath of its own (their jars
never mix): 4.9.7 (``tests/compat/java``: client, mqadmin, name server, broker) and 5.3.1
(``tests/compat/java53``: the remoting client and the broker; 5.3.1's name server is not on
Maven Central, the 4.9.7 one serves its broker).

Everything downloaded or built is kept once per machine (:mod:`testkit.build_cache`), so a fresh
clone reuses it:

* ``~/.cache/ferrymq-k8s/maven-repo`` Maven's local repository (``-Dmaven.repo.local``;
  ``FERRYMQ_MAVEN_REPO`` to put it elsewhere)
* ``~/.cache/ferrymq-k8s/builds/rocketmq-<version>-lib-<key>``: one version's jars, copied out of
  it (4.9.7: client, tools (mqadmin), name server, broker; 5.3.1: the remoting client and broker;
  5.3.2, ``ROCKETMQ532_VERSION``, the first broker with RECALL_MESSAGE, from the same
  ``tests/compat/java53`` project; 5.2.0, ``PROXY_VERSION``, Apache's gRPC proxy from
  ``tests/compat/proxy52``, which :mod:`testkit.apache` runs)
* ``~/.cache/ferrymq-k8s/builds/compat-classes-<version>-<key>``: that version's
  ``src/main/java`` (``tests/compat/java`` for 4.9.7) compiled by javac against them

* :func:`ensure_rocketmq_jars` / :func:`ensure_compat_classes` / :func:`java_classpath`
* :func:`run_java_client` runs ``ferrymq.compat.ProduceConsume`` and returns its JSON events;
  :class:`JavaClient` is a session's handle on it; :func:`java_client_command` its command line
* :func:`run_mqadmin` runs the real ``mqadmin`` (``MQAdminStartup``)

The Apache name server and broker processes are :mod:`testkit.apache`. Only these modules and
``tests/compat/conftest.py`` know about Maven, javac and JVM flags; tests do not.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable, Sequence
from xml.sax.saxutils import escape as _xml_escape

from testkit import build_cache

__all__ = [
    "ROCKETMQ_VERSION",
    "ROCKETMQ5_VERSION",
    "ROCKETMQ532_VERSION",
    "PROXY_VERSION",
    "CompatUnavailable",
    "CompatError",
    "JavaClientError",
    "JavaEvents",
    "JavaClient",
    "ensure_rocketmq_jars",
    "ensure_compat_classes",
    "maven_lock",
    "copy_dependencies",
    "compile_java",
    "java_classpath",
    "java_client_command",
    "run_java_client",
    "run_mqadmin",
    "session_dir",
    "write_rocketmq_home",
    "client_jvm_args",
]

ROCKETMQ_VERSION = "4.9.7"
ROCKETMQ5_VERSION = "5.3.1"  # in tests/compat/java53/pom.xml
# 5.3.2's broker (the first with RECALL_MESSAGE): the same Maven project, its version passed to
# Maven (-Drocketmq.version); jars in .cache/rocketmq-5.3.2/lib
ROCKETMQ532_VERSION = "5.3.2"
# Apache's gRPC proxy (rocketmq-proxy, and its broker) from tests/compat/proxy52/pom.xml: 5.3.x's
# proxy is not served by every Maven mirror (Maven Central as reached here answers "Could not find
# artifact" for rocketmq-proxy 5.3.0 and 5.3.1), 5.2.0's is; jars in .cache/rocketmq-5.2.0/lib
PROXY_VERSION = "5.2.0"

REPO_ROOT = Path(__file__).resolve().parents[1]
# Maven Central's jars do not change with our sources: one local repository for every clone on
# the machine, beside the other downloads kept across clones (~/.cache/ferrymq-k8s), so a fresh
# clone does not fetch ~170 MB in its first tests.
MAVEN_REPO = Path(os.environ.get("FERRYMQ_MAVEN_REPO") or Path.home() / ".cache" / "ferrymq-k8s" / "maven-repo")


@dataclass(frozen=True)
class _Toolchain:
    """One RocketMQ version's Maven project; its jars and our programs compiled against them are
    builds of :mod:`testkit.build_cache`."""

    version: str
    project: Path  # pom.xml and src/main/java
    more_sources: Path | None = None  # programs for this version only (another project's src/main/java)

    @property
    def sources(self) -> list[Path]:
        roots = [self.project / "src" / "main" / "java"]
        return roots + ([self.more_sources / "src" / "main" / "java"] if self.more_sources else [])


_COMPAT = REPO_ROOT / "tests" / "compat"
_TOOLCHAINS = {
    ROCKETMQ_VERSION: _Toolchain(ROCKETMQ_VERSION, _COMPAT / "java"),
    ROCKETMQ5_VERSION: _Toolchain(ROCKETMQ5_VERSION, _COMPAT / "java53"),
    ROCKETMQ532_VERSION: _Toolchain(ROCKETMQ532_VERSION, _COMPAT / "java53", _COMPAT / "java532"),
    # jars only (no programs of ours): the proxy runs from them, see testkit/apache.py
    PROXY_VERSION: _Toolchain(PROXY_VERSION, _COMPAT / "proxy52"),
}


def _toolchain(version: str) -> _Toolchain:
    try:
        return _TOOLCHAINS[version]
    except KeyError:
        raise CompatError(f"compat: no Java toolchain for RocketMQ {version} "
                          f"(known: {', '.join(_TOOLCHAINS)})") from None

_DEPENDENCY_PLUGIN = "3.6.1"

PRODUCE_CONSUME_MAIN = "ferrymq.compat.ProduceConsume"
# ferrymq.compat.MQAdmin = org.apache.rocketmq.tools.command.MQAdminStartup + a prompt exit
MQADMIN_MAIN = "ferrymq.compat.MQAdmin"

# Short-lived client JVMs (ProduceConsume, mqadmin): small heap, C1 only, no perf file.
CLIENT_JVM_OPTS = (
    "-Xms32m", "-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData", "-Xshare:auto",
)
# RocketMQ 4.9 reflects into java.nio buffers (mmap clean-up) and java.lang; open them on JDK 17.
_JDK17_OPENS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)
# Lines of Maven output that mean "could not reach the repository" rather than a broken pom.
_NETWORK_FAILURE = re.compile(
    r"(Could not transfer artifact|Could not resolve host|UnknownHostException|Unknown host"
    r"|Connection refused|Connection reset|connect timed out|Read timed out|Network is unreachable"
    r"|No route to host|Temporary failure in name resolution|transfer failed for"
    r"|was cached in the local repository, resolution will not be reattempted"
    r"|Could not resolve dependencies|Plugin .* could not be resolved"
    r"|Failed to read artifact descriptor|PKIX path building failed|Remote host terminated"
    r"|No plugin found for prefix)",
    re.IGNORECASE,
)


class CompatError(RuntimeError):
    """The harness itself failed (a JVM did not start, javac failed, ...)."""


class CompatUnavailable(CompatError):
    """The Apache jars cannot be had here (Maven Central unreachable). Tests skip on this."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class JavaClientError(CompatError):
    """The Java client exited non-zero (``events`` holds what it printed before)."""

    def __init__(self, message: str, events: "JavaEvents"):
        super().__init__(message)
        self.events = events


class JavaEvents(list):
    """The JSON-line events a Java program printed (a plain ``list[dict]``) plus run details."""

    returncode: int
    stderr: str
    noise: list[str]  # stdout lines that were not JSON objects
    elapsed: float
    argv: list[str]

    def of(self, event: str) -> list[dict]:
        """Events of one kind, e.g. ``events.of("received")``."""
        return [e for e in self if e.get("event") == event]

    @property
    def done(self) -> dict | None:
        """The final ``{"event": "done", ...}`` summary, if the program got that far."""
        found = self.of("done")
        return found[-1] if found else None


# ---------------------------------------------------------------------------------------------
# Tools, caching, building


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise CompatError(
            f"compat: `{name}` is not on PATH; the compat tests need a JDK (17) and Maven (3.8+)"
        )
    return path


def maven_lock():
    """One Maven at a time on the machine: clones and pytest processes share MAVEN_REPO, and
    Maven 3.8 does not lock the artifacts it downloads into it."""
    return build_cache.file_lock(MAVEN_REPO.with_name(MAVEN_REPO.name + ".lock"))


def copy_dependencies(pom: Path, output: Path, *, what: str, timeout: float, args: Sequence[str] = ()) -> None:
    """``mvn dependency:copy-dependencies`` of ``pom``'s runtime scope into ``output``, with the
    machine's Maven repository. Raises :class:`CompatUnavailable` when the registry cannot be
    reached or it takes over ``timeout`` seconds, :class:`CompatError` for any other failure."""
    cmd = [
        _require_tool("mvn"), "-q", "-B", "-f", str(pom),
        # e.g. FERRYMQ_COMPAT_MAVEN_ARGS="-s /path/settings.xml" for a mirror or proxy
        *shlex.split(os.environ.get("FERRYMQ_COMPAT_MAVEN_ARGS", "")),
        f"-Dmaven.repo.local={MAVEN_REPO}", *args,
        # fully qualified: no plugin-prefix look-up (which hides the network error)
        f"org.apache.maven.plugins:maven-dependency-plugin:{_DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={output}",
    ]
    with maven_lock():
        try:
            proc = subprocess.run(cmd, cwd=pom.parent, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompatUnavailable(f"{what} took more than {timeout:.0f}s") from None
    if proc.returncode != 0:
        output_text = proc.stdout + proc.stderr
        network = [ln for ln in output_text.splitlines() if _NETWORK_FAILURE.search(ln)]
        if network:
            raise CompatUnavailable(f"{what}: {_maven_failure_reason(network[0])}")
        raise CompatError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{output_text[-4000:]}")


def compile_java(sources: Sequence[Path], classpath: str, output: Path) -> None:
    """javac ``sources`` against ``classpath`` into ``output``."""
    if not sources:
        raise CompatError("no Java sources to compile")
    proc = subprocess.run(
        [_require_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-Xlint:none", "-d", str(output),
         "-cp", classpath, *map(str, sources)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise CompatError(f"javac failed:\n{proc.stdout}{proc.stderr}")


_jars_lock = threading.Lock()
_jars_failures: dict[str, CompatUnavailable] = {}


def ensure_rocketmq_jars(version: str = ROCKETMQ_VERSION, *, timeout: float = 270) -> Path:
    """Resolve one RocketMQ version's jars with Maven once per machine; return the directory
    holding them (a build keyed by the version and its ``pom.xml``).

    Raises :class:`CompatUnavailable` when Maven Central cannot be reached or the download takes
    over ``timeout`` seconds (kept under pytest's 300 s timeout; remembered for the rest of the
    process, so Maven runs once), :class:`CompatError` for any other failure.
    """
    chain = _toolchain(version)
    pom = chain.project / "pom.xml"

    def resolve(lib: Path) -> None:
        if version in _jars_failures:
            raise _jars_failures[version]
        _require_tool("java")
        t0 = time.monotonic()
        try:
            copy_dependencies(pom, lib, what=f"resolving RocketMQ {version} with Maven", timeout=timeout,
                              args=["-U", f"-Drocketmq.version={version}"])  # a project may serve several versions
        except CompatUnavailable as e:
            _jars_failures[version] = e
            raise
        jars = list(lib.glob("*.jar"))
        if not any(j.name.startswith("rocketmq-broker-") for j in jars):
            raise CompatError(f"mvn succeeded but {lib} holds no rocketmq-broker jar")
        print(f"compat: resolved {len(jars)} RocketMQ {version} jars in {time.monotonic() - t0:.1f}s",
              file=sys.stderr)

    with _jars_lock:
        return build_cache.cached(f"rocketmq-{version}-lib", build_cache.digest([pom], chain.project, version),
                                  resolve)


def _maven_failure_reason(line: str) -> str:
    """One short line out of Maven's network error."""
    line = re.sub(r"\x1b\[[0-9;]*m", "", line).replace("[ERROR]", "").replace("-> [Help 1]", "")
    line = line.strip()
    m = re.search(r"Could not transfer artifact (\S+) from/to (\S+ \([^)]*\))", line)
    if m:
        cause = line.rsplit(": ", 1)[-1]
        return f"cannot download {m.group(1)} from {m.group(2)}: {cause}"[:300]
    return line[:300]


def ensure_compat_classes(version: str = ROCKETMQ_VERSION) -> Path:
    """The version's ``src/main/java`` (``tests/compat/java`` for 4.9.7) compiled with javac
    against its jars, once per machine for given sources and jars."""
    chain = _toolchain(version)
    lib = ensure_rocketmq_jars(version)
    sources = sorted(p for root in chain.sources for p in root.rglob("*.java"))
    if not sources:
        raise CompatError(f"no Java sources under {chain.sources[0]}")
    key = build_cache.digest(sources, _COMPAT, lib.name)
    return build_cache.cached(f"compat-classes-{version}", key,
                              lambda classes: compile_java(sources, str(lib / "*"), classes))


def java_classpath(version: str = ROCKETMQ_VERSION) -> str:
    """Classpath with our compiled programs and one version's RocketMQ jars (built if needed)."""
    classes = ensure_compat_classes(version)
    return os.pathsep.join([str(classes), str(ensure_rocketmq_jars(version) / "*")])


# ---------------------------------------------------------------------------------------------
# Logging set-up: nothing on stdout, everything under a temp dir

_LOGBACK_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by testkit/java_client.py -->
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{file}</file>
    <append>true</append>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5p [%t] %c{{0}} - %m%n</pattern><charset>UTF-8</charset></encoder>
  </appender>
  <root level="{level}"><appender-ref ref="FILE"/></root>
</configuration>
"""


def write_rocketmq_home(home: Path, log_dir: Path, level: str = "INFO", *, create_log_dir: bool = True) -> Path:
    """A ROCKETMQ_HOME whose conf/ holds the logback files 4.9.7 loads by fixed name.

    NamesrvStartup reads ``$ROCKETMQ_HOME/conf/logback_namesrv.xml``, BrokerStartup
    ``conf/logback_broker.xml`` and MQAdminStartup ``conf/logback_tools.xml``; the client itself
    logs with its own inner logger to ``-Drocketmq.client.logRoot``. ``create_log_dir=False``:
    ``log_dir`` is a path where the programs will run (a pod's), made by the loggers themselves.
    """
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    if create_log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    for name, log in (
        ("logback_namesrv.xml", "namesrv.log"),
        ("logback_broker.xml", "broker.log"),
        ("logback_tools.xml", "tools.log"),
        ("logback_client.xml", "client-slf4j.log"),
    ):
        (conf / name).write_text(
            _LOGBACK_TEMPLATE.format(file=_xml_escape(str(log_dir / log)), level=level)
        )
    return home


_session_dir: Path | None = None
_session_lock = threading.Lock()


def session_dir() -> Path:
    """Per-process temp dir for client logs and the tools' ROCKETMQ_HOME (removed at exit
    unless ``FERRYMQ_COMPAT_KEEP=1``)."""
    global _session_dir
    with _session_lock:
        if _session_dir is None:
            d = Path(tempfile.mkdtemp(prefix="ferrymq-compat-"))
            write_rocketmq_home(d / "home", d / "logs")
            if os.environ.get("FERRYMQ_COMPAT_KEEP") != "1":
                atexit.register(shutil.rmtree, d, True)
            _session_dir = d
        return _session_dir


def client_jvm_args(home: PurePath, log_dir: PurePath, debug: bool = False) -> list[str]:
    """The JVM flags of a client program: small heap, JDK 17 opens, its logs under ``log_dir``
    and ``home`` (written by :func:`write_rocketmq_home`) as ROCKETMQ_HOME; ``home`` and
    ``log_dir`` may name paths of another machine (e.g. a pod's)."""
    return [
        *CLIENT_JVM_OPTS,
        *_JDK17_OPENS,
        f"-Duser.home={home.parent}",
        f"-Drocketmq.home.dir={home}",
        f"-Drocketmq.client.logRoot={log_dir}",
        f"-Drocketmq.client.logLevel={'DEBUG' if debug else 'INFO'}",
        "-Drocketmq.client.logUseSlf4j=false",
        # netty and other slf4j users: to a file, never the console
        f"-Dlogback.configurationFile={home / 'conf' / 'logback_client.xml'}",
    ]


def _pdeathsig():  # pragma: no cover - runs in the child
    """Kill the JVM if the Python process dies without cleaning up (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------
# Running Java programs


def java_client_command(args: Sequence[str], *, main: str = PRODUCE_CONSUME_MAIN,
                        jvm_args: Sequence[str] = (), debug: bool = False,
                        version: str = ROCKETMQ_VERSION) -> list[str]:
    """The full ``java ...`` command line :func:`run_java_client` would run."""
    d = session_dir()
    return [
        _require_tool("java"), *client_jvm_args(d / "home", d / "logs", debug), *jvm_args,
        "-cp", java_classpath(version), main, *map(str, args),
    ]


def _parse_events(stdout: str) -> tuple[list[dict], list[str]]:
    events, noise = [], []
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith("{"):
            try:
                obj = json.loads(s)
            except ValueError:
                noise.append(line)
                continue
            if isinstance(obj, dict):
                events.append(obj)
                continue
        if s:
            noise.append(line)
    return events, noise


def _client_log_tail(lines: int = 60) -> str:
    log = session_dir() / "logs" / "rocketmq_client.log"
    if not log.is_file():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def run_java_client(args: Sequence[str], timeout: float = 120, *, check: bool = True,
                    main: str = PRODUCE_CONSUME_MAIN, jvm_args: Sequence[str] = (),
                    debug: bool = False, version: str = ROCKETMQ_VERSION) -> JavaEvents:
    """Run a Java program of ours (default ``ferrymq.compat.ProduceConsume``) to completion.

    Returns its stdout JSON lines as a :class:`JavaEvents` (a ``list[dict]``). With ``check``
    (default) a non-zero exit prints stderr/stdout/client-log tails to stderr and raises
    :class:`JavaClientError` (its ``.events`` has what was printed). A timeout always raises.
    ``debug=True`` sets ``-Drocketmq.client.logLevel=DEBUG`` (written to the client log).
    ``version`` picks the toolchain (``ROCKETMQ5_VERSION``: our ``tests/compat/java53`` programs
    on the 5.3.1 client's classpath).
    """
    cmd = java_client_command(args, main=main, jvm_args=jvm_args, debug=debug, version=version)
    run = run_to_end(cmd, timeout, preexec_fn=_pdeathsig)
    out, err = run.out, run.err
    events_list, noise = _parse_events(out)
    events = JavaEvents(events_list)
    events.returncode = run.returncode
    events.stderr = err
    events.noise = noise
    events.elapsed = run.elapsed
    events.argv = cmd
    if run.timed_out or (check and run.returncode != 0):
        why = f"timed out after {timeout:.0f}s" if run.timed_out else f"exited {run.returncode}"
        report = (
            f"compat: Java client {main} {why}: {' '.join(map(str, args))}\n"
            f"--- stderr ---\n{err[-6000:]}\n"
            f"--- stdout (last 40 lines) ---\n" + "\n".join(out.splitlines()[-40:]) + "\n"
            f"--- rocketmq_client.log (tail) ---\n{_client_log_tail()}\n"
        )
        print(report, file=sys.stderr)
        raise JavaClientError(report if run.timed_out else report[:2000], events)
    return events


@dataclass
class Finished:
    """A program run to its end: its output, exit code, whether it was killed at the timeout."""

    out: str
    err: str
    returncode: int
    timed_out: bool
    elapsed: float


def run_to_end(cmd: Sequence[str], timeout: float, *, env: dict | None = None,
               preexec_fn: Callable[[], None] | None = None) -> Finished:
    """Run ``cmd`` with its stdout and stderr collected; killed after ``timeout`` s."""
    t0 = time.monotonic()
    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=preexec_fn)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        out, err = proc.communicate()
    return Finished(out, err, proc.returncode, timed_out, time.monotonic() - t0)


def run_mqadmin(namesrv: str, *args: str, timeout: float = 60, check: bool = True,
                credentials: tuple[str, str] | None = None) -> str:
    """Run the official ``mqadmin SUBCOMMAND -n NAMESRV ARGS...``; return its stdout.

    ``credentials`` (access key, secret key) go where mqadmin reads them, a
    ``conf/tools.yml`` under its ROCKETMQ_HOME, so every request it sends is signed.

    ``mqadmin`` exits 0 even when a sub-command fails (it prints the exception to stderr); with
    ``check`` a non-zero exit or a stderr naming ``SubCommandException`` raises
    :class:`CompatError`.
    """
    if not args:
        raise ValueError("run_mqadmin needs a sub-command, e.g. run_mqadmin(ns, 'clusterList')")
    sub, rest = args[0], list(args[1:])
    jvm_args: list[str] = []
    if credentials is not None:
        home = Path(tempfile.mkdtemp(prefix="mqadmin-home-", dir=session_dir()))
        write_rocketmq_home(home, session_dir() / "logs")
        (home / "conf" / "tools.yml").write_text(f"accessKey: {credentials[0]}\nsecretKey: {credentials[1]}\n")
        jvm_args.append(f"-Drocketmq.home.dir={home}")
    cmd = java_client_command([sub, "-n", namesrv, *rest], main=MQADMIN_MAIN, jvm_args=jvm_args)
    proc = subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
        preexec_fn=_pdeathsig,
    )
    if check and (proc.returncode != 0 or "SubCommandException" in proc.stderr):
        raise CompatError(
            f"mqadmin {' '.join(args)} failed (exit {proc.returncode}):\n"
            f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


class JavaClient:
    """Convenience front-end to ``ferrymq.compat.ProduceConsume`` and mqadmin (the
    ``java_client`` fixture). Every method returns :class:`JavaEvents` (a ``list[dict]``)."""

    def run(self, args: Sequence[str], timeout: float = 120, *, check: bool = True,
            debug: bool = False) -> JavaEvents:
        return run_java_client(args, timeout, check=check, debug=debug)

    __call__ = run

    @staticmethod
    def _opts(namesrv: str, topic: str, group: str | None, timeout_ms: int,
              **opts) -> list[str]:
        args = ["--namesrv", namesrv, "--topic", topic, "--timeout-ms", str(timeout_ms)]
        if group:
            args += ["--group", group]
        for name, value in opts.items():
            if value is None:
                continue
            if isinstance(value, (list, tuple, set)):
                value = ",".join(map(str, value))
            args += ["--" + name.replace("_", "-"), str(value)]
        return args

    def produce_consume(self, namesrv: str, topic: str, *, count: int = 20,
                        modes: Sequence[str] = ("sync", "async", "oneway"),
                        group: str | None = None, tag: str | None = None,
                        key_prefix: str | None = None, subscribe: str | None = None,
                        timeout_ms: int = 30000, check: bool = True,
                        debug: bool = False) -> JavaEvents:
        """Send ``count`` messages per mode, then push-consume until every key arrived."""
        args = ["produce-consume", *self._opts(
            namesrv, topic, group, timeout_ms, count=count, modes=list(modes), tag=tag,
            key_prefix=key_prefix, subscribe=subscribe)]
        return self.run(args, timeout_ms / 1000 + 60, check=check, debug=debug)

    def produce(self, namesrv: str, topic: str, *, count: int = 20,
                modes: Sequence[str] = ("sync", "async", "oneway"), group: str | None = None,
                tag: str | None = None, key_prefix: str | None = None,
                timeout_ms: int = 30000, check: bool = True, debug: bool = False) -> JavaEvents:
        """Only send (for a Python consumer to read). Keys are ``KEY_PREFIX-MODE-I``."""
        args = ["produce", *self._opts(namesrv, topic, group, timeout_ms, count=count,
                                       modes=list(modes), tag=tag, key_prefix=key_prefix)]
        return self.run(args, timeout_ms / 1000 + 60, check=check, debug=debug)

    def consume(self, namesrv: str, topic: str, *, expect_keys: Sequence[str] | None = None,
                expect_count: int | None = None, group: str | None = None,
                subscribe: str | None = None, settle_ms: int | None = None,
                timeout_ms: int = 30000, check: bool = True, debug: bool = False) -> JavaEvents:
        """Only push-consume (e.g. what a Python producer sent) until ``expect_keys`` all
        arrived or ``expect_count`` distinct keys did; with neither, until ``timeout_ms``."""
        keys = list(expect_keys or ())
        keys_arg: str | None = ",".join(keys) or None
        if keys_arg and len(keys_arg) > 16000:  # argv strings are limited to 128 KiB
            fd, path = tempfile.mkstemp(prefix="keys-", suffix=".txt", dir=session_dir())
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("\n".join(keys) + "\n")
            keys_arg = "@" + path
        args = ["consume", *self._opts(namesrv, topic, group, timeout_ms,
                                       expect_keys=keys_arg,
                                       expect_count=expect_count, subscribe=subscribe,
                                       settle_ms=settle_ms)]
        return self.run(args, timeout_ms / 1000 + 60, check=check, debug=debug)

    @staticmethod
    def mqadmin(namesrv: str, *args: str, timeout: float = 60, check: bool = True) -> str:
        return run_mqadmin(namesrv, *args, timeout=timeout, check=check)
