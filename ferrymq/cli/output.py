"""Printing for the CLI: human-readable tables by default, JSON with ``--json``."""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence


def emit_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, sort_keys=True), flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 1
