"""Signed-in sessions, held in the console's memory: an unguessable id (the cookie), the
account's name and a CSRF token for write calls. A session ends when it is signed out, when it
has been idle for the idle time, or at its absolute lifetime; a console restart ends them all."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Session", "Sessions"]


@dataclass
class Session:
    id: str
    user: str
    csrf_token: str
    started: float
    last_seen: float = field(default=0.0)
    account: Any = None  # the account itself when it is not in the accounts file (single sign-on)


class Sessions:
    def __init__(self, *, idle_seconds: float, lifetime_seconds: float, max_sessions: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds = idle_seconds
        self.lifetime_seconds = lifetime_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently seen first

    def start(self, user: str, account: Any = None) -> Session:
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), now, now, account)
        self._sessions[session.id] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle time restarts), or None."""
        session = self._sessions.get(session_id or "")
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self.idle_seconds or now - session.started > self.lifetime_seconds:
            del self._sessions[session.id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session.id)
        return session

    def end(self, session_id: str | None) -> None:
        self._sessions.pop(session_id or "", None)

    def end_user(self, user: str) -> None:
        """Every session of ``user`` (an account removed or changed)."""
        for sid in [s.id for s in self._sessions.values() if s.user == user]:
            del self._sessions[sid]

    def __len__(self) -> int:
        return len(self._sessions)
