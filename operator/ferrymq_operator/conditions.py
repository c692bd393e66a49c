"""Kubernetes-style status conditions (type, status, reason, message, lastTransitionTime).

lastTransitionTime changes only when a condition's status flips, as the API conventions
say; reason and message may be refreshed at any time. ``transitions`` tells the handlers
which conditions flipped, so Events are emitted on transitions only, never on every resync.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None = Unknown
    reason: str
    message: str = ""

    @property
    def status_str(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def merge(old: list[dict] | None, new: list[Condition], now: str | None = None) -> list[dict]:
    """The new condition list: types in ``new`` replace the old ones of the same type (keeping
    lastTransitionTime when the status did not change); other old types are kept."""
    now = now or now_rfc3339()
    by_type = {c["type"]: c for c in old or []}
    out = []
    for c in new:
        prev = by_type.pop(c.type, None)
        same = prev is not None and prev.get("status") == c.status_str
        out.append({"type": c.type, "status": c.status_str, "reason": c.reason, "message": c.message,
                    "lastTransitionTime": prev["lastTransitionTime"] if same and prev.get("lastTransitionTime") else now})
    out.extend(by_type.values())
    return out


def transitions(old: list[dict] | None, new: list[dict]) -> list[dict]:
    """Conditions of ``new`` whose status differs from ``old`` (or that are new)."""
    before = {c["type"]: c.get("status") for c in old or []}
    return [c for c in new if before.get(c["type"]) != c["status"]]


def get(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c["type"] == type_), None)


def is_true(conditions: list[dict] | None, type_: str) -> bool:
    c = get(conditions, type_)
    return c is not None and c.get("status") == "True"
