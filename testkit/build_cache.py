"""What the tests build from downloads and from our sources, kept once per machine.

Maven-resolved jars, javac output and npm installs depend on their inputs (a pom, Java sources, a
``package.json``), not on the clone that asked for them. Each build lives in
``~/.cache/ferrymq-k8s/builds/<name>-<key>`` (``FERRYMQ_BUILD_CACHE`` moves it), ``key`` a digest of
its inputs: a fresh clone on a machine that ran the tests before reuses them, and a changed input
gives a new key, so a stale build is never picked up.

A build runs into a staging directory under a lock per name (clones and pytest workers share the
cache) and appears complete or not at all. When a new build of a name is made, the same name's
builds unused for :data:`PRUNE_AFTER_DAYS` are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["BUILDS", "PRUNE_AFTER_DAYS", "cached", "digest", "file_lock"]

BUILDS = Path(os.environ.get("FERRYMQ_BUILD_CACHE") or Path.home() / ".cache" / "ferrymq-k8s" / "builds")
PRUNE_AFTER_DAYS = 14
_COMPLETE = ".complete"  # written last into a staging directory: its key


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock on ``path`` (created if missing) between processes and threads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def digest(files: Iterable[Path], root: Path, extra: str = "") -> str:
    """A digest of ``files`` (their paths relative to ``root`` and their bytes) and ``extra``."""
    h = hashlib.sha256(extra.encode() + b"\0")
    for p in sorted(files):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def cached(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The directory of build ``name`` for inputs ``key``: ``build(staging)`` fills an empty
    staging directory when there is none yet (an exception leaves nothing behind)."""
    final = BUILDS / f"{name}-{key[:16]}"
    if _complete(final, key):
        return final
    with file_lock(BUILDS / "locks" / f"{name}.lock"):
        if _complete(final, key):
            return final
        staging = final.with_name(final.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            build(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / _COMPLETE).write_text(key + "\n")
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        _prune(name, keep=final)
    return final


def _complete(path: Path, key: str) -> bool:
    marker = path / _COMPLETE
    try:
        if marker.read_text().strip() != key:
            return False
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.utime(marker)  # in use: not pruned
    return True


def _prune(name: str, keep: Path) -> None:
    cutoff = time.time() - PRUNE_AFTER_DAYS * 86400
    for old in BUILDS.glob(f"{name}-*"):
        rest = old.name[len(name) + 1:]
        if old == keep or len(rest) != 16 or not all(c in "0123456789abcdef" for c in rest):
            continue  # another name's build, or a staging directory
        try:
            if (old / _COMPLETE).stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue
