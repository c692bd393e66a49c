"""The test layers' own rules (docs/contributing.md#rules): a missing prerequisite skips locally, fails in CI."""

import os
import subprocess
import sys
import time

import pytest

from testkit import build_cache, ports
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


def test_a_build_is_made_once_per_machine_and_a_changed_input_or_a_failure_never_serves_a_stale_one(tmp_path, monkeypatch):
    """Jars, compiled classes and npm installs are kept once per machine (testkit.build_cache): a
    second clone asking for the same inputs gets the first one's build without building; a failed
    build leaves nothing that a later call would take for finished."""
    monkeypatch.setattr(build_cache, "BUILDS", tmp_path)
    src = tmp_path / "clone" / "Hello.java"
    src.parent.mkdir()
    src.write_text("class Hello {}")
    built = []

    def build(out):
        built.append(out)
        (out / "Hello.class").write_text(src.read_text())

    key = build_cache.digest([src], src.parent)
    first = build_cache.cached("classes", key, build)
    assert build_cache.cached("classes", key, build) == first and len(built) == 1
    assert (first / "Hello.class").read_text() == "class Hello {}"

    src.write_text("class Hello { int x; }")
    changed = build_cache.digest([src], src.parent)
    assert changed != key

    def broken(out):
        (out / "half").write_text("")
        raise RuntimeError("javac failed")

    with pytest.raises(RuntimeError, match="javac failed"):
        build_cache.cached("classes", changed, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["clone", "locks", first.name])
    second = build_cache.cached("classes", changed, build)
    assert second != first and (second / "Hello.class").read_text() == "class Hello { int x; }"
    assert first.exists()  # another clone may still use it


def test_builds_unused_for_two_weeks_are_removed_when_a_new_one_of_their_name_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(build_cache, "BUILDS", tmp_path)
    make = lambda out: (out / "x").write_text("")  # noqa: E731
    old = build_cache.cached("lib", "a" * 64, make)
    recent = build_cache.cached("lib", "b" * 64, make)
    other = build_cache.cached("lib-extra", "c" * 64, make)  # another name sharing the prefix
    month_ago = time.time() - 30 * 86400
    for d in (old, other):
        os.utime(d / ".complete", (month_ago, month_ago))
    build_cache.cached("lib", "d" * 64, make)
    assert not old.exists() and recent.exists() and other.exists()
    os.utime(recent / ".complete", (month_ago, month_ago))
    assert build_cache.cached("lib", "b" * 64, make) == recent  # used again: kept
    build_cache.cached("lib", "e" * 64, make)
    assert recent.exists()
