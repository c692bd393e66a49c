"""The real Apache RocketMQ name server (4.9.7) and broker (4.9.7, or 5.3.1 with
``broker_version=ROCKETMQ5_VERSION``, or 5.3.2 with ``ROCKETMQ532_VERSION``) as subprocesses (:class:`ApacheRocketMQ`),
optionally with Apache's gRPC proxy in cluster mode in front (``proxy_version=PROXY_VERSION``, 5.2.0:
``rocketmq-proxy`` 5.3.x is not on every Maven mirror) or in local mode, the broker in the proxy's own
process (``proxy_mode="local"``: one JVM serving gRPC and remoting, the broker of the proxy's version),
and a minimal remoting probe (:func:`remoting_request`, :func:`namesrv_cluster_info`). The jars come
from :mod:`testkit.java_client`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from testkit.java_client import (_JDK17_OPENS, PROXY_VERSION, ROCKETMQ_VERSION, CompatError, _pdeathsig,
                                 _require_tool, ensure_rocketmq_jars, write_rocketmq_home)
from testkit.ports import free_port

__all__ = ["PROXY_MODES", "PROXY_VERSION", "ApacheRocketMQ", "grpc_query_route", "namesrv_cluster_info",
           "remoting_request"]

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
# The stock runserver.sh/runbroker.sh want 4 GiB/8 GiB heaps and a 15 GiB direct limit.
NAMESRV_JVM_OPTS = (
    "-Xms128m", "-Xmx128m", "-XX:MaxDirectMemorySize=64m", "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
)
BROKER_JVM_OPTS = (
    "-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
)
PROXY_JVM_OPTS = (
    "-Xms192m", "-Xmx192m", "-XX:MaxDirectMemorySize=128m", "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
)
# "cluster": the proxy a process of its own, the broker found through the name server;
# "local": ProxyStartup -pm local builds the broker (BrokerStartup.createBrokerController) in its
# own process from a broker.conf (-bc), so one JVM (broker_jvm_opts) serves gRPC and remoting.
PROXY_MODES = ("cluster", "local")


# ---------------------------------------------------------------------------------------------
# A minimal remoting probe


_GET_BROKER_CLUSTER_INFO = 106


def remoting_request(addr: str, code: int, ext_fields: dict | None = None, body: bytes = b"",
                     timeout: float = 3.0) -> tuple[dict, bytes]:
    """One RocketMQ remoting request/response over TCP with a JSON header (for probes only)."""
    host, _, port = addr.rpartition(":")
    header = json.dumps({
        "code": code, "language": "PYTHON", "version": 433, "opaque": 1, "flag": 0,
        "extFields": ext_fields or {}, "serializeTypeCurrentRPC": "JSON",
    }).encode()
    frame = struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame)

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = s.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError(f"{addr} closed the connection")
                buf += chunk
            return buf

        (length,) = struct.unpack(">I", read(4))
        data = read(length)
    (mark,) = struct.unpack(">I", data[:4])
    hlen = mark & 0xFFFFFF
    return json.loads(data[4:4 + hlen]), data[4 + hlen:]


def grpc_query_route(endpoint: str, topic: str, timeout: float = 3.0) -> tuple[int, int]:
    """One gRPC QueryRoute (RocketMQ 5 protocol) to ``endpoint``: (status code, message queues)."""
    import grpc

    from ferrymq.grpc.protocol import pb, rpc, spb

    host, _, port = endpoint.rpartition(":")
    request = spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=pb.Endpoints(
        scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=host, port=int(port))]))
    metadata = (("x-mq-client-id", "ferrymq-probe@1"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
    with grpc.insecure_channel(endpoint) as channel:
        response = rpc.MessagingServiceStub(channel).QueryRoute(request, metadata=metadata, timeout=timeout)
    return response.status.code, len(response.message_queues)


def namesrv_cluster_info(namesrv: str, timeout: float = 3.0) -> str:
    """The raw GET_BROKER_CLUSTER_INFO body (fastjson text, not always strict JSON)."""
    header, body = remoting_request(namesrv, _GET_BROKER_CLUSTER_INFO, timeout=timeout)
    if header.get("code") != 0:
        raise CompatError(f"GET_BROKER_CLUSTER_INFO from {namesrv}: {header}")
    return body.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# The real Apache name server + broker


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    stdout_path: Path
    started: float
    ready_after: float | None = None


@dataclass
class ApacheRocketMQ:
    """A real Apache RocketMQ 4.9.7 name server and broker, as subprocesses.

    ``broker_version="5.3.1"`` (``ROCKETMQ5_VERSION``) runs Apache's 5.3.1 broker instead,
    ``"5.3.2"`` (``ROCKETMQ532_VERSION``) its 5.3.2 broker, registered with the 4.9.7 name server
    (5's name server is not on Maven Central); each JVM gets its own version's jars only.

    ``proxy_version=PROXY_VERSION`` adds Apache's gRPC proxy (:attr:`grpc_endpoint`): a process
    of its own in front of the broker (``proxy_mode="cluster"``, the default) or, with
    ``proxy_mode="local"``, the broker itself (``ProxyStartup -pm local``): one JVM, started with
    ``broker_jvm_opts``, that serves gRPC on :attr:`grpc_endpoint` and remoting on
    :attr:`broker_addr`; its broker is the proxy's version (``broker_version`` becomes it).
    :attr:`broker_pid` is the process doing the broker's work in either case (for CPU accounting).
    ``proxy_tls=True``: the proxy also accepts TLS (``tls.server.mode=permissive``, a self-signed
    certificate: the proxy's ``tlsTestModeEnable``) beside plaintext on the same port.

    Use as a context manager (``with ApacheRocketMQ() as mq: mq.namesrv_addr``) or call
    :meth:`start` / :meth:`stop`. Ports are free 127.0.0.1 ports (the broker's P-2 VIP and P+1 HA
    ports included), the store, ROCKETMQ_HOME and all logs live in ``workdir`` (a fresh temp dir
    by default, removed by :meth:`stop` unless ``keep_workdir`` or ``FERRYMQ_COMPAT_KEEP=1``).
    """

    cluster_name: str = "FerryCompatCluster"
    broker_name: str = "ferry-compat-broker-a"
    broker_conf: dict[str, str] = field(default_factory=dict)  # extra/overriding broker.conf keys
    broker_version: str = ROCKETMQ_VERSION
    proxy_version: str | None = None  # PROXY_VERSION: Apache's gRPC proxy (cluster mode) in front
    proxy_mode: str = "cluster"  # or "local": the broker runs inside the proxy's process
    proxy_tls: bool = False  # the proxy accepts TLS too (permissive), else plaintext only
    proxy_conf: dict = field(default_factory=dict)  # extra/overriding rmq-proxy.json keys
    plain_acl: str | None = None  # written to $ROCKETMQ_HOME/conf/plain_acl.yml (with aclEnable=true)
    namesrv_jvm_opts: Sequence[str] = NAMESRV_JVM_OPTS
    broker_jvm_opts: Sequence[str] = BROKER_JVM_OPTS
    proxy_jvm_opts: Sequence[str] = PROXY_JVM_OPTS
    startup_timeout: float = 60.0
    workdir: Path | None = None
    keep_workdir: bool = False

    namesrv_port: int = 0
    broker_port: int = 0
    proxy_grpc_port: int = 0
    proxy_remoting_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # seconds: namesrv, broker, total
    _procs: list[_Proc] = field(default_factory=list, repr=False)
    _own_workdir: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.proxy_mode not in PROXY_MODES:
            raise ValueError(f"proxy_mode={self.proxy_mode!r}: one of {', '.join(PROXY_MODES)}")
        if self.proxy_mode == "local":
            if not self.proxy_version:
                raise ValueError("proxy_mode='local' needs proxy_version (e.g. PROXY_VERSION)")
            if self.broker_version not in (ROCKETMQ_VERSION, self.proxy_version):
                raise ValueError(f"proxy_mode='local' runs the proxy's own broker ({self.proxy_version}), "
                                 f"not broker_version={self.broker_version}")
            self.broker_version = self.proxy_version

    def __repr__(self) -> str:
        return (f"ApacheRocketMQ(namesrv={self.namesrv_addr}, broker={self.broker_addr}, "
                f"workdir={self.workdir}, alive={self.alive()})")

    # -- addresses -------------------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def grpc_endpoint(self) -> str:
        """The proxy's gRPC endpoint (RocketMQ 5 clients); only with ``proxy_version``."""
        assert self.proxy_version, "no proxy: ApacheRocketMQ(proxy_version=PROXY_VERSION)"
        return f"127.0.0.1:{self.proxy_grpc_port}"

    @property
    def local_mode(self) -> bool:
        return self.proxy_mode == "local"

    @property
    def broker_pid(self) -> int | None:
        """The pid of the process that runs the broker: the broker's, or in local mode the proxy's."""
        name = "proxy" if self.local_mode else "broker"
        for proc in self._procs:
            if proc.name == name and proc.popen.poll() is None:
                return proc.popen.pid
        return None

    @property
    def broker_vip_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port - 2}"

    @property
    def log_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "logs"

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "ApacheRocketMQ":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.dump_logs()
        self.stop()

    def start(self) -> "ApacheRocketMQ":
        t0 = time.monotonic()
        java = _require_tool("java")
        cp = str(ensure_rocketmq_jars() / "*")
        proxy_cp = str(ensure_rocketmq_jars(self.proxy_version) / "*") if self.proxy_version else None
        # local mode: the broker's classes are the proxy's (its own version's rocketmq-broker jar)
        broker_cp = proxy_cp if self.local_mode else str(ensure_rocketmq_jars(self.broker_version) / "*")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="ferrymq-apache-rocketmq-"))
            self._own_workdir = True
        atexit.register(self.stop)
        fixed_ports = bool(self.namesrv_port or self.broker_port or self.proxy_grpc_port)
        for attempt in range(1, 4):
            try:
                self._launch(java, cp, broker_cp, proxy_cp)
                break
            except CompatError as e:
                # a free port can be taken between our probe and the JVM's bind: pick again
                lost_race = "Address already in use" in f"{e}\n{self.logs()}"
                if fixed_ports or not lost_race or attempt == 3:
                    self.dump_logs()
                    self.stop()
                    raise
                self._kill(graceful=False)
                self.namesrv_port = self.broker_port = self.proxy_grpc_port = self.proxy_remoting_port = 0
            except BaseException:
                self.dump_logs()
                self.stop()
                raise
        self.timings["total"] = time.monotonic() - t0
        return self

    def _launch(self, java: str, cp: str, broker_cp: str, proxy_cp: str | None = None) -> None:
        assert self.workdir is not None
        wd = self.workdir
        for sub in ("store", "logs", "namesrv"):
            shutil.rmtree(wd / sub, ignore_errors=True)
        home = write_rocketmq_home(wd / "home", wd / "logs")
        if self.plain_acl is not None:
            (home / "conf" / "plain_acl.yml").write_text(self.plain_acl)
        (wd / "store").mkdir(parents=True, exist_ok=True)
        self.namesrv_port = self.namesrv_port or free_port()
        self.broker_port = self.broker_port or free_port(exclude={self.namesrv_port})
        common = [
            *_JDK17_OPENS,
            f"-Duser.home={wd}",
            f"-Drocketmq.home.dir={home}",
            f"-Drocketmq.client.logRoot={wd / 'logs'}",
            "-Drocketmq.client.logUseSlf4j=true",
            f"-Dlogback.configurationFile={home / 'conf' / 'logback_client.xml'}",
        ]
        # Plain TCP only. The default "permissive" mode also accepts TLS, and builds a
        # self-signed certificate at start-up (~1.4 s of RSA key generation per server).
        plain = "-Dtls.server.mode=disabled"

        ns_conf = wd / "namesrv.conf"
        ns_conf.write_text(_properties({
            "listenPort": str(self.namesrv_port),
            "rocketmqHome": str(home),
            "kvConfigPath": str(wd / "namesrv" / "kvConfig.json"),
        }))
        ns = self._spawn("namesrv", [java, *self.namesrv_jvm_opts, *common, plain, "-cp", cp,
                                     NAMESRV_MAIN, "-c", str(ns_conf)])
        self._wait(ns, lambda: b"boot success" in ns.stdout_path.read_bytes()
                   and _port_open(self.namesrv_port), "name server start-up")

        conf = {
            "brokerClusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.namesrv_addr,
            "listenPort": str(self.broker_port),
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "rocketmqHome": str(home),
            "storePathRootDir": str(wd / "store"),
            "storePathCommitLog": str(wd / "store" / "commitlog"),
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            # small files: the defaults are a 1 GiB commit log and ~420 MB index files
            "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
            "mappedFileSizeConsumeQueue": str(30000 * 20),
            "maxHashSlotNum": "50000",
            "maxIndexNum": "200000",
            # a loaded 2-core CI machine must not make the broker shed sends as "busy"
            "waitTimeMillsInSendQueue": "5000",
            "osPageCacheBusyTimeOutMills": "5000",
            "diskMaxUsedSpaceRatio": "95",
        }
        conf.update({k: str(v) for k, v in self.broker_conf.items()})
        broker_conf = wd / "broker.conf"
        broker_conf.write_text(_properties(conf))
        if self.local_mode:
            assert proxy_cp
            self._launch_proxy(java, proxy_cp, common, home, broker_conf)
            return
        broker = self._spawn("broker", [java, *self.broker_jvm_opts, *common, plain, "-cp", broker_cp,
                                         BROKER_MAIN, "-c", str(broker_conf)])
        self._wait(broker, self._broker_registered, "broker registration with the name server")
        if proxy_cp:
            self._launch_proxy(java, proxy_cp, common, home)

    def _launch_proxy(self, java: str, proxy_cp: str, common: list[str], home: Path,
                      broker_conf: Path | None = None) -> None:
        """Apache's proxy: gRPC for RocketMQ 5 clients. In cluster mode the broker behind it is
        found through the name server; in local mode (``broker_conf``) the proxy builds the broker
        in its own JVM from that file. Ready when the broker is registered with the name server
        and the proxy answers a QueryRoute (:meth:`_proxy_routes`)."""
        assert self.workdir is not None
        taken = {self.namesrv_port, self.broker_port, self.broker_port - 2, self.broker_port + 1}
        self.proxy_grpc_port = self.proxy_grpc_port or free_port(exclude=taken)
        self.proxy_remoting_port = self.proxy_remoting_port or free_port(exclude=taken | {self.proxy_grpc_port})
        conf = {
            "rocketMQClusterName": self.cluster_name,
            "namesrvAddr": self.namesrv_addr,
            "proxyMode": self.proxy_mode,
            "grpcServerPort": self.proxy_grpc_port,
            "remotingListenPort": self.proxy_remoting_port,
            "localServeAddr": "127.0.0.1",
            # the broker's timerMaxDelaySec (3 days), not the proxy's own 1-day default
            "maxDelayTimeMills": 3 * 24 * 3600 * 1000,
            # topics are created without a message.type attribute (NORMAL): FIFO, delay and
            # transactional sends to them would be refused; FerryMQ has no such check
            "enableTopicMessageTypeCheck": False,
        }
        conf.update(self.proxy_conf)
        conf_path = self.workdir / "rmq-proxy.json"
        conf_path.write_text(json.dumps(conf, indent=2))
        jvm_opts = self.broker_jvm_opts if broker_conf else self.proxy_jvm_opts
        tls = "-Dtls.server.mode=permissive" if self.proxy_tls else "-Dtls.server.mode=disabled"
        args = ["-pm", self.proxy_mode, "-pc", str(conf_path)]
        if broker_conf:
            args += ["-bc", str(broker_conf)]
        proxy = self._spawn("proxy", [java, *jvm_opts, *common, tls, f"-DRMQ_PROXY_HOME={home}",
                                       "-cp", proxy_cp, PROXY_MAIN, *args])
        if broker_conf:
            self._wait(proxy, self._broker_registered, "the local-mode broker's registration with the name server")
        self._wait(proxy, self._proxy_routes, "gRPC QueryRoute answered by the proxy")

    def _proxy_routes(self) -> bool:
        from ferrymq.grpc.protocol import Code

        # In local mode the broker in the proxy's JVM marks the cluster's topic a system topic,
        # which the proxy refuses to route (ILLEGAL_TOPIC): ask for a topic nobody created, and
        # take "not found" (the name server's answer, relayed) as ready.
        topic = "FerryProxyReadyProbe" if self.local_mode else self.cluster_name
        try:
            code, queues = grpc_query_route(self.grpc_endpoint, topic, timeout=1.0)
        except Exception as e:  # grpc.RpcError: not listening yet
            raise CompatError(str(e)) from e
        if self.local_mode:
            return code == Code.TOPIC_NOT_FOUND
        return code == Code.OK and queues > 0

    def _spawn(self, name: str, cmd: list[str]) -> _Proc:
        assert self.workdir is not None
        out_path = self.workdir / f"{name}.out"
        with open(out_path, "wb") as out:
            popen = subprocess.Popen(
                cmd, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_pdeathsig,
            )
        proc = _Proc(name, popen, out_path, time.monotonic())
        self._procs.append(proc)
        return proc

    def _wait(self, proc: _Proc, ready, what: str) -> None:
        deadline = proc.started + self.startup_timeout
        while True:
            if proc.popen.poll() is not None:
                raise CompatError(
                    f"Apache {proc.name} exited with {proc.popen.returncode} before {what}; "
                    f"{proc.stdout_path}:\n{_tail(proc.stdout_path)}"
                )
            try:
                if ready():
                    break
            except (OSError, ValueError, CompatError):
                pass
            if time.monotonic() > deadline:
                raise CompatError(f"Apache {proc.name}: no {what} within {self.startup_timeout}s")
            time.sleep(0.05)
        proc.ready_after = time.monotonic() - proc.started
        self.timings[proc.name] = proc.ready_after

    def _broker_registered(self) -> bool:
        return self.broker_addr in namesrv_cluster_info(self.namesrv_addr, timeout=1.0)

    def is_registered(self) -> bool:
        """Whether the name server currently lists this broker."""
        try:
            return self._broker_registered()
        except (OSError, ValueError, CompatError):
            return False

    def stop(self, graceful: bool = False) -> None:
        """Stop the proxy and the broker, then the name server; idempotent.

        By default SIGKILL: the store is thrown away, and the broker's orderly shutdown (SIGTERM)
        takes over 5 s (DefaultMessageStore.shutdown sleeps 3 s). ``graceful=True`` sends
        SIGTERM and waits up to 30 s per process before killing it.
        """
        self._kill(graceful)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if (self._own_workdir and not self.keep_workdir
                and os.environ.get("FERRYMQ_COMPAT_KEEP") != "1" and self.workdir is not None):
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._own_workdir = False

    def _kill(self, graceful: bool) -> None:
        for proc in reversed(self._procs):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM if graceful else signal.SIGKILL)
                try:
                    proc.popen.wait(timeout=30 if graceful else 10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.popen.pid, signal.SIGKILL)
                    proc.popen.wait(timeout=10)
        self._procs.clear()

    def alive(self) -> bool:
        return bool(self._procs) and all(p.popen.poll() is None for p in self._procs)

    def logs(self, lines: int = 80) -> str:
        """Tails of the processes' stdout and of the name server / broker logs."""
        if self.workdir is None or not self.workdir.exists():
            return ""
        parts = []
        # 5.x's broker logs by its own logback file, under ${user.home}/logs/rocketmqlogs
        for path in [*(p.stdout_path for p in self._procs), self.log_dir / "namesrv.log",
                     self.log_dir / "broker.log", self.log_dir / "rocketmqlogs" / "broker.log",
                     self.log_dir / "rocketmqlogs" / "proxy.log"]:
            if path.is_file():
                parts.append(f"--- {path} (last {lines} lines) ---\n{_tail(path, lines)}")
        return "\n".join(parts)

    def dump_logs(self, file=None) -> None:
        print(f"compat: Apache RocketMQ logs ({self.workdir}):\n{self.logs()}",
              file=file or sys.stderr)


def _properties(d: dict[str, str]) -> str:
    # java.util.Properties: backslash is an escape character
    return "".join(f"{k}={str(v).replace(chr(92), chr(92) * 2)}\n" for k, v in d.items())


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 80) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"<{e}>"
