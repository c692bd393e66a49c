"""What a result file records of where it was measured: the machine and the commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def command_output(cmd: list[str]) -> str:
    """What ``cmd`` prints (stdout, else stderr: ``java -version`` writes there); "" when it
    cannot run."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (p.stdout or p.stderr).strip()


def git_commit(short: bool = False) -> dict:
    """The commit checked out and whether tracked files differ from it."""
    commit = command_output(["git", "-C", str(REPO), "rev-parse", *(["--short"] if short else []), "HEAD"])
    dirty = command_output(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(dirty)}


def machine_info() -> dict:
    """CPU model and count, memory, kernel, Python and Java versions, load average."""
    model = next((line.split(":", 1)[1].strip() for line in command_output(["lscpu"]).splitlines()
                  if line.lower().startswith("model name")), "")
    java = command_output(["java", "-version"]).splitlines()
    return {
        "hostname": platform.node(),
        "nproc": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        # The interpreter behind the virtualenv: its build (PGO and LTO or not) moves the broker's
        # CPU per message by a fifth (docs/operations.md#the-interpreter).
        "python_interpreter": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        "java": java[0] if java else "?",
        "load_avg": list(os.getloadavg()),
    }
