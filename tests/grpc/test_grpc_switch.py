"""gRPC on and off: off unless ``grpcListenPort`` asks for it; a broker without the ``grpc``
extra still starts (gRPC off, one line saying so) and refuses to start when gRPC is asked for.
The missing package is a real import failure in a real ``ferrymq`` process (its
``rocketmq`` module made unimportable before the CLI runs)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from ferrymq.broker.broker import Broker
from ferrymq.broker.config import BrokerConfig
from ferrymq.common.config_loader import ConfigError
from ferrymq.store.config import StoreConfig
from testkit.ports import free_port
from testkit.processes import REPO
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

# `ferrymq ...` with the rocketmq-python-client package unimportable
WITHOUT_PACKAGE = ("import sys; sys.modules['rocketmq'] = None; "
                   "from ferrymq.cli.main import main; sys.exit(main())")


def ferrymq_without_package(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_PACKAGE, "--log-level", "info", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


async def test_grpc_is_off_unless_asked_for(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ferrymq.grpc")
    c = await InProcessCluster(tmp_path).start()
    try:
        assert c.broker.grpc is None
        assert "gRPC endpoint off (grpcListenPort=-1)" in caplog.text
    finally:
        await c.stop()


def test_a_broker_built_without_its_grpc_side_refuses_grpc(tmp_path):
    """The broker does not import ferrymq/grpc (issue 32): whoever builds it hands the gRPC side in
    (ferrymq.grpc.wiring.broker_grpc). Forgetting to is a clear error, not a broker without gRPC."""
    config = BrokerConfig(listen_port=0, grpc_listen_port=free_port())
    with pytest.raises(ConfigError, match="grpcListenPort=.*broker_grpc"):
        Broker(config, StoreConfig(store_path_root_dir=str(tmp_path / "store")))
    assert not (tmp_path / "store").exists(), "refused before the store was touched"


def test_asked_for_without_the_package_the_broker_refuses_to_start(tmp_path):
    result = ferrymq_without_package("broker", "--namesrv", "127.0.0.1:1", "--broker-port", str(free_port()),
                                     "--data-dir", str(tmp_path), "--set", f"grpcListenPort={free_port()}",
                                     timeout=60)
    assert result.returncode != 0
    assert "grpcListenPort=" in result.stderr and "pip install 'ferrymq[grpc]'" in result.stderr, result.stderr
    assert not (tmp_path / "commitlog").exists(), "refused before the store was touched"


def test_without_the_package_the_broker_starts_with_grpc_off(tmp_path):
    # standalone serves until a signal; --demo is not used: a timeout ends it once ready
    proc = subprocess.Popen([sys.executable, "-c", WITHOUT_PACKAGE, "--log-level", "info", "standalone",
                             "--namesrv-port", str(free_port()), "--broker-port", str(free_port()),
                             "--data-dir", str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "FerryMQ standalone is ready" in line:
                break
    finally:
        proc.terminate()
        proc.wait(30)
    text = "".join(lines)
    assert "FerryMQ standalone is ready" in text, text
    assert "gRPC endpoint off (grpcListenPort=-1); it would also need:" in text, text


def test_serving_grpc_writes_nothing_into_the_users_home(tmp_path):
    """The generated classes come from the official client's package, whose own ``__init__`` sets
    up a log file under ``~/logs``: the broker loads only the protocol modules, so a broker whose
    home is not writable (the image: a read-only root filesystem) serves gRPC all the same."""
    home = tmp_path / "home"  # never created: like the image's /nonexistent
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "ferrymq.cli.main", "--log-level", "info", "standalone",
                             "--namesrv-port", str(free_port()), "--broker-port", str(free_port()),
                             "--data-dir", str(tmp_path / "store"), "--set", f"grpcListenPort={free_port()}"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "FerryMQ standalone is ready" in line:
                break
    finally:
        proc.terminate()
        proc.wait(30)
    text = "".join(lines)
    assert "FerryMQ standalone is ready" in text, text
    assert not home.exists(), f"the broker wrote into its home: {sorted(p.name for p in home.rglob('*'))}"
