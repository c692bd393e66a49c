"""Who consumes by POP: the clients that received lately (POP clients send no heartbeats, so
this is how the admin views see them), what their requests said of them, and whether a group
consumes a topic by POP now (a receive held, or one within ``POP_ACTIVE_SECONDS``)."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

POP_ACTIVE_SECONDS = 30.0  # a group that received within this is a POP consumer of the topic
CLIENTS_SEEN_SECONDS = POP_ACTIVE_SECONDS * 4  # the admin views' default window


@dataclass(frozen=True)
class ReceiverAgent:
    """A remoting POP receiver as its POP_MESSAGE describes it (for admin views)."""

    language: int  # LanguageCode
    version: int
    expression: str = "*"
    expression_type: str = "TAG"


class Receivers:
    def __init__(self) -> None:
        self._receiving: dict[tuple[str, str], int] = defaultdict(int)  # receives running now
        self._last_receive: dict[tuple[str, str], float] = {}
        self._clients: dict[str, dict[str, tuple[str, float]]] = defaultdict(dict)  # group -> client -> (topic, when)
        self._agents: dict[tuple[str, str], ReceiverAgent] = {}  # (group, client) -> its last POP_MESSAGE's

    def seen(self, group: str, topic: str, client_id: str, agent: ReceiverAgent | None) -> None:
        """A receive by ``client_id`` (what a remoting request says of its client: ``agent``)."""
        if client_id:
            self._clients[group][client_id] = (topic, time.monotonic())
            if agent is not None:
                self._agents[(group, client_id)] = agent

    @contextmanager
    def receiving(self, group: str, topic: str) -> Iterator[None]:
        """Around one receive, held or not: the group POP-consumes the topic meanwhile."""
        key = (group, topic)
        self._receiving[key] += 1
        try:
            yield
        finally:
            self._receiving[key] -= 1
            self._last_receive[key] = time.monotonic()

    def active(self, group: str, topic: str) -> bool:
        """A receive of ``group`` for ``topic`` is running, or ended within POP_ACTIVE_SECONDS."""
        key = (group, topic)
        if self._receiving.get(key):
            return True
        last = self._last_receive.get(key)
        return last is not None and time.monotonic() - last < POP_ACTIVE_SECONDS

    def clients(self, group: str, within_seconds: float = CLIENTS_SEEN_SECONDS) -> dict[str, str]:
        """POP clients of ``group`` that received within ``within_seconds``: client id -> the
        topic of its last receive."""
        now = time.monotonic()
        seen = self._clients.get(group, {})
        for client in [c for c, (_, when) in seen.items() if now - when > within_seconds]:
            del seen[client]
            self._agents.pop((group, client), None)
        if not seen:
            self._clients.pop(group, None)
        return {client: topic for client, (topic, _) in sorted(seen.items())}

    def agent(self, group: str, client_id: str) -> ReceiverAgent | None:
        """What a remoting POP receiver's last request in ``group`` said of it (its topic is the
        one ``clients`` names); None for others."""
        return self._agents.get((group, client_id))

    def groups(self, within_seconds: float = CLIENTS_SEEN_SECONDS) -> list[str]:
        """Groups with POP clients that received within ``within_seconds``."""
        return [group for group in sorted(self._clients) if self.clients(group, within_seconds)]
