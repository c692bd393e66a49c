"""The suite's results file: the table's rows and every run's figures, with the commit and the
machine they were measured on (docs/chaos.md). The checker stays pure; the I/O is here."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path

from e2e.chaos.checker import Result, rows, table

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (p.stdout or p.stderr).strip()


def git_commit() -> dict:
    commit = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(dirty)}


def machine_info() -> dict:
    model = ""
    for line in _run(["lscpu"]).splitlines():
        if line.lower().startswith("model name"):
            model = line.split(":", 1)[1].strip()
    java = _run(["java", "-version"]).splitlines()
    return {
        "hostname": platform.node(),
        "nproc": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java[0] if java else "?",
        "load_avg": list(os.getloadavg()),
    }


def results_document(results: list[Result], extra: dict | None = None) -> dict:
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git": git_commit(),
        "machine": machine_info(),
        **(extra or {}),
        "table": table(results).splitlines(),
        "rows": [asdict(r) for r in rows(results)],
        "runs": [r.summary() for r in results],
    }


def write_results(path: str | Path, results: list[Result], extra: dict | None = None) -> dict:
    """Write the JSON results file (``extra``: e.g. the cluster layout, the seed); return it."""
    doc = results_document(results, extra)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(p)
    return doc
