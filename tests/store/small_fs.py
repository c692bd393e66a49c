"""A small real file system for disk-full tests: a size-limited tmpfs, else an ext4 loop file.

Both need root (mount). ``small_filesystem`` yields (mount point, how it was made) or
raises SmallFsUnavailable with one line saying what failed, for the test to skip on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


class SmallFsUnavailable(RuntimeError):
    pass


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def small_filesystem(where: Path, size_mb: int) -> Iterator[tuple[Path, str]]:
    mount_point = where / "smallfs"
    mount_point.mkdir(parents=True, exist_ok=True)
    errors = []
    kind = None
    if shutil.which("mount"):
        r = _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point))
        if r.returncode == 0:
            kind = f"tmpfs of {size_mb} MiB"
        else:
            errors.append(f"tmpfs: {r.stderr.strip() or r.returncode}")
        if kind is None and shutil.which("mkfs.ext4"):
            image = where / "smallfs.img"
            with open(image, "wb") as f:
                f.truncate(size_mb * 1024 * 1024)
            r = _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
            if r.returncode == 0:
                r = _run("mount", "-o", "loop", str(image), str(mount_point))
            if r.returncode == 0:
                kind = f"ext4 loop file of {size_mb} MiB"
            else:
                errors.append(f"loop file: {r.stderr.strip() or r.returncode}")
    else:
        errors.append("no mount command")
    if kind is None:
        raise SmallFsUnavailable("cannot make a small file system (" + "; ".join(errors) + ")")
    try:
        yield mount_point, kind
    finally:
        for _ in range(3):
            if _run("umount", str(mount_point)).returncode == 0:
                break
            _run("sync")
        else:
            _run("umount", "-l", str(mount_point))


@contextlib.contextmanager
def small_filesystem_or_skip(where: Path, size_mb: int, what: str) -> Iterator[Path]:
    """``small_filesystem``'s mount point, or the test skipped (failed under CI) saying that
    ``what`` has no small file system here."""
    from tests.support import missing_prerequisite
    try:
        with small_filesystem(where, size_mb) as (path, _):
            yield path
    except SmallFsUnavailable as e:
        missing_prerequisite(f"no small file system for {what}: {e}")


def fill_to(path: Path, used_ratio: float) -> Path:
    """Write a filler file until the file system holding ``path`` is ``used_ratio`` full."""
    st = os.statvfs(path)
    total, free = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize
    want = int(total * used_ratio) - (total - free)
    filler = path / "filler"
    with open(filler, "ab") as f:
        if want > 0:
            f.write(b"\xff" * want)
        f.flush()
        os.fsync(f.fileno())
    return filler


def fill_completely(path: Path) -> Path:
    """Write a filler file in ``path`` until the file system says ENOSPC (unbuffered: nothing
    is left to fail when the file is closed); delete it to free the space."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\xff" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler
