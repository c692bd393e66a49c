"""The test layers' own rules (docs/contributing.md#rules): a missing prerequisite skips locally, fails in CI."""

import os
import subprocess
import sys

import pytest

from testkit import ports
from tests.support import missing_prerequisite


def test_missing_prerequisite_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Maven Central"):
        missing_prerequisite("no Maven Central")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing prerequisite under CI=true: no Maven Central"):
        missing_prerequisite("no Maven Central")


def test_a_port_claimed_by_another_live_test_process_is_not_handed_out_again(tmp_path, monkeypatch):
    """make test runs modules in parallel processes: a port one of them was given (free until
    its server binds it) must not be given to another; the claim of an ended process is void."""
    monkeypatch.setattr(ports, "CLAIMS_DIR", tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "40001").write_text(str(other.pid))
        assert not ports.claim(40000, 40001, 40002)
        assert not (tmp_path / "40000").exists()  # nothing half-claimed is left behind
        assert ports.claim(40003, 40004)
        assert ports.claim(40003)  # a process may claim its own ports again
    finally:
        other.kill()
        other.wait()
    assert ports.claim(40000, 40001, 40002)  # the holder ended: its claim is void
    assert (tmp_path / "40001").read_text() == str(os.getpid())


def test_ports_handed_out_are_never_ones_the_kernel_gives_outgoing_connections(tmp_path, monkeypatch):
    """A server's port from the ephemeral range can be taken as some connection's source port
    before the server binds it (EADDRINUSE in a parallel run): free_port keeps out of it."""
    monkeypatch.setattr(ports, "CLAIMS_DIR", tmp_path)
    first, last = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    handed = [ports.free_port() for _ in range(50)]
    assert not [p for p in handed for q in (p - 2, p, p + 1) if first <= q <= last]
    assert len(set(handed)) == len(handed)  # each claimed: never handed out twice
