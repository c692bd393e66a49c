"""The v2 clients this broker has heard from (Heartbeat, Telemetry, NotifyClientTermination):
client id, kind, group, language, version, subscriptions and when last seen. Expired after
``channelExpiredTimeout`` without a heartbeat, as remoting clients are. Imports nothing of gRPC:
the broker owns the table (admin views and /metrics read it through broker/online_clients.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class GrpcClient:
    client_id: str
    client_type: str = ""
    group: str = ""
    language: str = ""
    remote: str = ""
    version: str = ""
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> filter expression
    filter_types: dict[str, str] = field(default_factory=dict)  # topic -> "SQL92" (absent: TAG)
    last_seen: float = field(default_factory=time.monotonic)


class GrpcClients:
    def __init__(self) -> None:
        self.table: dict[str, GrpcClient] = {}

    def seen(self, client_id: str, *, client_type: str = "", group: str = "", language: str = "",
             remote: str = "", version: str = "", subscriptions: dict[str, str] | None = None,
             sql_topics: frozenset[str] = frozenset()) -> GrpcClient:
        """``subscriptions``: topic -> filter expression; ``sql_topics``: those whose expression is
        SQL92 (the others are tags)."""
        client = self.table.get(client_id)
        if client is None:
            client = self.table[client_id] = GrpcClient(client_id)
        client.client_type = client_type or client.client_type
        client.group = group or client.group
        client.language = language or client.language
        client.remote = remote or client.remote
        client.version = version or client.version
        if subscriptions:
            client.subscriptions.update(subscriptions)
            for topic in subscriptions:
                if topic in sql_topics:
                    client.filter_types[topic] = "SQL92"
                else:
                    client.filter_types.pop(topic, None)
        client.last_seen = time.monotonic()
        return client

    def gone(self, client_id: str) -> None:
        self.table.pop(client_id, None)

    def expire(self, max_idle_s: float) -> list[str]:
        now = time.monotonic()
        stale = [cid for cid, c in self.table.items() if now - c.last_seen > max_idle_s]
        for cid in stale:
            del self.table[cid]
        return stale

    def of_group(self, group: str) -> list[GrpcClient]:
        return [c for c in self.table.values() if c.group == group]

    def consumers(self) -> list[GrpcClient]:
        """Clients of a consumer group (simple and push consumers; producers carry no group)."""
        return [c for c in self.table.values() if c.group and c.client_type != "PRODUCER"]
