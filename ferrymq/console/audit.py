"""The audit log: one JSON line for every write action tried through the console and for every
sign-in and sign-out (who, what, when, from where, and how it ended), on the logger
``ferrymq.console.audit`` (at INFO, shown whatever the process's log level) and, with
``--audit-log FILE``, appended to that file."""

from __future__ import annotations

import datetime
import json
import logging

__all__ = ["AuditLog"]

log = logging.getLogger("ferrymq.console.audit")


class AuditLog:
    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._handler: logging.Handler | None = None
        log.setLevel(logging.INFO)
        if path:
            self._handler = logging.FileHandler(path, encoding="utf-8")
            self._handler.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(self._handler)

    def record(self, *, user: str | None, action: str, status: int, remote: str | None, **detail) -> dict:
        now = datetime.datetime.now(datetime.timezone.utc)
        entry = {"time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "user": user, "action": action, "status": status, "remote": remote, **detail}
        log.info(json.dumps(entry, separators=(",", ":"), ensure_ascii=False))
        return entry

    def close(self) -> None:
        if self._handler is not None:
            log.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
