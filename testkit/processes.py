"""FerryMQ servers as subprocesses on 127.0.0.1 with free ports and a temporary data
directory: any ``ferrymq`` command (``FerryProcess``), ``ferrymq standalone``
(``StandaloneProcess``) and a name server with a master/slave broker pair (``BrokerPair``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port

REPO = Path(__file__).resolve().parent.parent

SEGMENT = 1024 * 1024  # BrokerPair's CommitLog files are small: transfers cross file ends (blank tails) often


@dataclass
class FerryProcess:
    """Any ``ferrymq`` server command as a subprocess, ready once it prints ``ready_text``
    (``program``: another program's command line instead, run in ``cwd``)."""

    args: list[str]
    ready_text: str
    log_path: Path
    proc: subprocess.Popen | None = None
    program: list[str] | None = None
    cwd: Path = REPO

    def start(self, timeout: float = 30.0) -> "FerryProcess":
        cmd = [*self.program, *self.args] if self.program else \
            [sys.executable, "-m", "ferrymq.cli.main", "--log-level", "info", *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.args[:1])} exited with {self.proc.returncode}:\n{self.log()}")
            if self.ready_text.encode() in self.log_path.read_bytes():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{' '.join(self.args[:1])} did not become ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else 0

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class StandaloneProcess:
    """``ferrymq standalone`` as a subprocess (for restarts, kill -9 and foreign clients)."""

    data_dir: Path
    settings: list[str] = field(default_factory=list)
    namesrv_port: int = 0
    broker_port: int = 0
    http_port: int | None = None
    process: FerryProcess | None = None

    def start(self, timeout: float = 30.0) -> "StandaloneProcess":
        self.namesrv_port = self.namesrv_port or free_port()
        self.broker_port = self.broker_port or free_port()
        args = ["standalone", "--host", "127.0.0.1", "--namesrv-port", str(self.namesrv_port),
                "--broker-port", str(self.broker_port), "--data-dir", str(self.data_dir)]
        if self.http_port is not None:
            args += ["--http-port", str(self.http_port)]
        for s in self.settings:
            args += ["--set", s]
        log_path = self.data_dir.parent / f"{self.data_dir.name}-standalone-{time.time_ns()}.log"
        self.process = FerryProcess(args, "FerryMQ standalone is ready", log_path).start(timeout)
        return self

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.process.proc if self.process else None

    @property
    def log_path(self) -> Path | None:
        return self.process.log_path if self.process else None

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def log(self) -> str:
        return self.process.log() if self.process else ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        return self.process.stop(timeout) if self.process else 0

    def kill(self) -> None:
        if self.process:
            self.process.kill()


@dataclass
class BrokerPair:
    """A name server, a master and a slave under one brokerName, each its own process."""

    tmp: Path
    master_role: str = "SYNC_MASTER"
    settings: list[str] = field(default_factory=list)  # for both brokers
    namesrv_port: int = 0
    master_port: int = 0
    slave_port: int = 0
    processes: dict[str, FerryProcess] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def master_ha(self) -> str:
        return f"127.0.0.1:{self.master_port + 1}"

    @property
    def master_dir(self) -> Path:
        return self.tmp / "master"

    slave_dir_override: Path | None = None  # e.g. on a small file system

    @property
    def slave_dir(self) -> Path:
        return self.slave_dir_override or self.tmp / "slave"

    def start_namesrv(self) -> None:
        self.namesrv_port = self.namesrv_port or free_port()
        self.processes["namesrv"] = FerryProcess(["namesrv", "--port", str(self.namesrv_port)], "name server is ready",
                                                 self.tmp / f"namesrv-{time.time_ns()}.log").start()

    http_ports: dict[str, int] = field(default_factory=dict)  # broker name -> its /metrics port, when asked for

    def _broker(self, name: str, port: int, data_dir: Path, settings: list[str]) -> FerryProcess:
        args = ["broker", "--namesrv", self.namesrv, "--broker-port", str(port), "--data-dir", str(data_dir),
                "--set", "brokerName=ha-broker", "--set", "brokerClusterName=HACluster",
                "--set", f"mappedFileSizeCommitLog={SEGMENT}"]
        if name in self.http_ports:
            args += ["--http-port", str(self.http_ports[name])]
        for s in [*self.settings, *settings]:
            args += ["--set", s]
        return FerryProcess(args, "is ready on", self.tmp / f"{name}-{time.time_ns()}.log")

    def start_master(self, *settings: str) -> None:
        self.master_port = self.master_port or free_port()
        self.processes["master"] = self._broker("master", self.master_port, self.master_dir,
                                                [f"brokerRole={self.master_role}", *settings]).start()

    def start_slave(self, *settings: str) -> None:
        self.slave_port = self.slave_port or free_port()
        self.processes["slave"] = self._broker("slave", self.slave_port, self.slave_dir,
                                               ["brokerRole=SLAVE", "brokerId=1", *settings]).start()

    def logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{p.log()[-6000:]}" for name, p in self.processes.items())

    def stop_all(self) -> None:
        for p in reversed(list(self.processes.values())):
            p.stop()
