"""Fixtures of the k8s layer: one local control plane per session (see controlplane.py), the
chart installed with helm, real FerryMQ processes standing in for the (fake) broker pods, and
the operator as a process authenticated with the chart's own ServiceAccount token.

Run with ``make k8s-test`` (sets FERRYMQ_K8S_TESTS=1 after building the binaries); in a
plain ``make test`` these tests are skipped with one line saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ferrymq.client.admin import AdminClient
from tests.k8s.controlplane import BUILD_SCRIPT, REPO, ControlPlane, bin_dir, missing_binaries
from testkit.wait import poll_until
from testkit.ports import free_port
from testkit.processes import FerryProcess
from tests.support import missing_prerequisite

# The operator package (operator/ferrymq_operator, copied into its image, not pip-installed):
# importable for tests that check what the authorizer says about the objects it builds.
if str(REPO / "operator") not in sys.path:
    sys.path.insert(0, str(REPO / "operator"))

CLUSTER = "demo"          # Broker name in the tests = RocketMQ cluster name of the real brokers
RELEASE_NS = "ferrymq-system"
RELEASE = "ferrymq"
SA = "ferrymq-ferrymq-operator"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.k8s)
            if os.environ.get("FERRYMQ_K8S_TESTS") != "1":
                item.add_marker(pytest.mark.skip(reason="k8s layer: run `make k8s-test` (builds and starts a local control plane)"))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    if missing_binaries():
        if subprocess.run(["bash", "-c", "command -v go"], capture_output=True).returncode != 0:
            missing_prerequisite(f"control-plane binaries missing ({', '.join(missing_binaries())}) and no Go toolchain to build them")
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True)
    cp = ControlPlane(tmp_path_factory.mktemp("k8s"))
    try:
        cp.start()
    except Exception:
        print(cp.diagnostics())
        cp.stop()
        raise
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def helm_release(control_plane):
    """The chart, installed as a user would (its CRDs, owned by the release, RBAC, Deployment)."""
    control_plane.kubectl("create", "namespace", RELEASE_NS)
    control_plane.helm("install", RELEASE, str(REPO / "charts" / "ferrymq-operator"), "-n", RELEASE_NS, "--wait",
                       "--timeout", "180s")
    for crd in ("brokers.ferrymq.io", "topics.ferrymq.io", "consumergroups.ferrymq.io", "users.ferrymq.io"):
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return RELEASE


@pytest.fixture(scope="session")
def ferry_cluster(tmp_path_factory):
    """A real name server and two real brokers on 127.0.0.1: what the operator's admin calls
    reach instead of the fake pods. Broker names match the pods' (demo-broker-N), and
    protection is tight so tests can trip it with a small backlog."""
    work = tmp_path_factory.mktemp("ferry")
    ns_port = free_port()
    procs = [FerryProcess(["namesrv", "--host", "127.0.0.1", "--namesrv-port", str(ns_port)],
                          "name server is ready", work / "namesrv.log").start()]
    addr = f"127.0.0.1:{ns_port}"
    for i in range(2):
        procs.append(FerryProcess(
            ["broker", "--host", "127.0.0.1", "--namesrv", addr, "--broker-port", str(free_port()),
             "--data-dir", str(work / f"broker-{i}"),
             "--set", f"brokerClusterName={CLUSTER}", "--set", f"brokerName={CLUSTER}-broker-{i}",
             "--set", "disableConsumeIfConsumerReadSlowly=true", "--set", "consumerFallbehindThreshold=1024",
             "--set", "protectBrokerIntervalMillis=300", "--set", "mappedFileSizeCommitLog=4194304"],
            "is ready", work / f"broker-{i}.log").start())

    class Cluster:
        namesrv_addr = addr
        processes = procs

    yield Cluster
    for p in reversed(procs):
        p.stop()


@pytest.fixture
def ferry_slaves(ferry_cluster, tmp_path):
    """A real slave (brokerId 1) of each real broker, for tests whose fake slave pods must
    replicate: the operator reads each slave's lag from its master before it restarts the
    master. brokerName -> the slave's process; stopped (and resumed first if a test paused it)
    at the end, so the brokers are masters alone again for the next test."""
    slaves = {}
    for i in range(2):
        name = f"{CLUSTER}-broker-{i}"
        slaves[name] = FerryProcess(
            ["broker", "--host", "127.0.0.1", "--namesrv", ferry_cluster.namesrv_addr, "--broker-port", str(free_port()),
             "--data-dir", str(tmp_path / f"slave-{i}"), "--set", f"brokerClusterName={CLUSTER}",
             "--set", f"brokerName={name}", "--set", "brokerId=1", "--set", "brokerRole=SLAVE",
             "--set", "mappedFileSizeCommitLog=4194304"], "is ready", tmp_path / f"slave-{i}.log").start()

    async def every_master_has_its_slave() -> bool:
        async with AdminClient(namesrv_addr=ferry_cluster.namesrv_addr) as admin:
            addrs = await admin.master_addrs(CLUSTER)
            infos = [await admin.broker_runtime_info(addrs[name]) for name in slaves]
        return all(json.loads(info.get("ferrymqHaSlaves") or "[]") for info in infos)

    try:
        poll_until("each real broker replicating to its slave", lambda: asyncio.run(every_master_has_its_slave()), 60)
        yield slaves
    finally:
        for p in slaves.values():
            if p.proc and p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
            p.stop()


LEASE = "ferrymq-ferrymq-operator"  # the chart's Lease name (the release's full name)


class OperatorProcess:
    """One ``python -m ferrymq_operator`` (the image's entrypoint) with the chart's
    ServiceAccount token, so every call it makes goes through the chart's RBAC; with leader
    election as the chart configures it, as replica ``identity``."""

    def __init__(self, control_plane, ferry_cluster, work: Path, identity: str) -> None:
        token = control_plane.kubectl("create", "token", SA, "-n", RELEASE_NS, "--duration=2h").stdout.strip()
        kubeconfig = control_plane.token_kubeconfig(token, work / f"kubeconfig-{identity}")
        self.identity = identity
        self.log = work / f"operator-{identity}.log"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO)]),
               "FERRYMQ_NAMESRV_OVERRIDES": json.dumps({"*": ferry_cluster.namesrv_addr}),
               "FERRYMQ_RESYNC_SECONDS": "2", "FERRYMQ_BROKER_RESYNC_SECONDS": "1", "FERRYMQ_ADMIN_TIMEOUT": "3",
               # kwok pods are fake: a "restarted" pod would leave its real broker read-only.
               "FERRYMQ_RESTART_DRAIN_SECONDS": "0",
               # test_groups and test_operator_ha count the resyncs in the log (DEBUG by default)
               "FERRYMQ_LOG_RESYNCS": "true",
               # as the chart's Deployment sets them (values.yaml leaderElection)
               "FERRYMQ_LEADER_ELECTION": "true", "FERRYMQ_LEASE_NAME": LEASE, "POD_NAMESPACE": RELEASE_NS,
               "POD_NAME": identity, "FERRYMQ_LIVENESS_PORT": str(free_port())}
        self.liveness_port = int(env["FERRYMQ_LIVENESS_PORT"])
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "ferrymq_operator"], stdout=log,
                                            stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def leads(self) -> bool:
        return f"leader election: {self.identity} leads" in self.log_text()

    def wait_started(self, what: str = "leads", timeout: float = 60) -> None:
        """Until it leads (``what="leads"``) or waits as a standby (``"standby"``)."""
        mark = {"leads": f"leader election: {self.identity} leads",
                "standby": f"leader election: {self.identity} waits for the Lease"}[what]
        try:
            poll_until(f"operator {self.identity} {what}",
                       lambda: self.process.poll() is not None or mark in self.log_text(), timeout)
        finally:
            if self.process.poll() is not None:
                raise RuntimeError(f"operator {self.identity} exited with {self.process.returncode}:\n{self.log_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def operator_process(control_plane, helm_release, ferry_cluster, tmp_path_factory):
    """The leading operator of the session. A test that replaces it (tests/k8s/test_operator_ha.py)
    puts its successor in ``current`` (``process`` and ``log`` follow it)."""
    work = tmp_path_factory.mktemp("operator")

    class Operator:
        current: OperatorProcess
        workdir = work

        @property
        def process(self):
            return self.current.process

        @property
        def log(self) -> Path:
            return self.current.log

        def log_text(self) -> str:
            return self.current.log_text()

    operator = Operator()
    operator.current = OperatorProcess(control_plane, ferry_cluster, work, "operator-a")
    try:
        operator.current.wait_started("leads")
    except Exception:
        operator.current.stop(signal.SIGKILL)
        raise
    yield operator
    operator.current.stop()


@pytest.fixture
def namespace(control_plane, request):
    name = f"t-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        print(control_plane.kubectl("get", "all,pvc,brokers,topics,consumergroups,events", "-n", name, check=False).stdout)
        print(control_plane.diagnostics())
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator_logs(operator_process, request):
    """Print the operator's log of this test on failure."""
    start = operator_process.log.stat().st_size if operator_process.log.exists() else 0
    yield operator_process
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        with open(operator_process.log, "rb") as f:
            f.seek(start)
            print("--- operator log ---\n" + f.read().decode(errors="replace")[-20000:])


__all__ = ["bin_dir"]
