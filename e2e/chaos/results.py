"""The suite's results file: the table's rows and every run's figures, with the commit and the
machine they were measured on (docs/chaos.md). The checker stays pure; the I/O is here."""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict
from pathlib import Path

from e2e.chaos.checker import Result, rows, table
from testkit.machine import git_commit, machine_info

REPO = Path(__file__).resolve().parents[2]


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
