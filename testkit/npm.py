"""Node.js programs the tests run as peers (``tests/compat/node5``: the RocketMQ 5 client;
``tests/console/oidc``: an OpenID Connect provider), each a directory with its ``package.json``
installed with npm once per machine (:mod:`testkit.build_cache`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testkit import build_cache
from testkit.java_client import CompatError, CompatUnavailable

__all__ = ["ensure_npm_project"]

_NETWORK_HINTS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "network")


def ensure_npm_project(name: str, project: Path, *, timeout: float = 270) -> Path:
    """``project``'s ``package.json`` and scripts with their ``npm install``, in a build directory
    named by a digest of those files. Raises CompatUnavailable when the registry cannot be reached."""
    files = [project / "package.json", *sorted(project.glob("*.js")), *sorted(project.glob("*.mjs"))]
    return build_cache.cached(name, build_cache.digest(files, project),
                              lambda out: _npm_install(files, out, f"npm install of {project.name}", timeout))


def _npm_install(files: list[Path], out: Path, what: str, timeout: float) -> None:
    npm = shutil.which("npm")
    if not npm:
        raise CompatError("`npm` is not on PATH (Node.js peers need Node 20+ and npm)")
    for f in files:
        shutil.copy2(f, out / f.name)
    try:
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=out,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompatUnavailable(f"{what} took more than {timeout:.0f}s") from None
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        network = [ln for ln in output.splitlines() if any(h in ln for h in _NETWORK_HINTS)]
        if network:
            raise CompatUnavailable(f"{what}: {network[0].strip()[:300]}")
        raise CompatError(f"{what} failed (exit {proc.returncode})\n{output[-4000:]}")
