"""Who consumes a group right now, whatever the generation of the client: one read-only view
over the three places the broker learns of consumers.

- ``remoting``: 4.x clients heartbeating over remoting (ConsumerManager) - the only ones that
  rebalance, so GET_CONSUMER_LIST_BY_GROUP (the input of every 4.x client's queue allocation)
  keeps answering from ConsumerManager alone: a 5.x client owns no queues and must not be
  allocated any;
- ``gRPC v2``: 5.x SimpleConsumer/PushConsumer clients (Heartbeat, Telemetry settings, Receive)
  in the gRPC endpoint's client table; gone ``channelExpiredTimeout`` after the last of those
  (here at once; the endpoint's own sweep drops them from its table later);
- ``POP``: remoting POP receivers (POP_MESSAGE), which send no heartbeat here: seen while they
  receive, gone ``channelExpiredTimeout`` after their last receive.

A client id known to several sources is reported once, by the first of that order (a gRPC
receive is also a POP receive). Admin answers (GET_CONSUMER_CONNECTION_LIST) and /metrics read
this view; nothing here changes who owns which queue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ferrymq.broker.consumer_manager import ConsumerManager
from ferrymq.broker.pop.receivers import ReceiverAgent
from ferrymq.remoting.codes import LanguageCode

REMOTING = "remoting"
GRPC = "gRPC v2"
POP = "POP"
PROTOCOLS = (REMOTING, GRPC, POP)


@dataclass(frozen=True)
class OnlineClient:
    client_id: str
    address: str
    protocol: str  # REMOTING, GRPC or POP
    language: str
    version: str
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> filter expression
    filter_types: dict[str, str] = field(default_factory=dict)  # topic -> "SQL92"; absent: TAG


class GrpcClientView(Protocol):
    client_id: str
    group: str
    remote: str
    language: str
    version: str
    subscriptions: dict[str, str]
    filter_types: dict[str, str]
    last_seen: float  # time.monotonic()


class GrpcClientTable(Protocol):
    """What this view uses of ferrymq.grpc.clients.GrpcClients."""

    def consumers(self) -> list[GrpcClientView]: ...


def _language_name(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class OnlineClients:
    def __init__(self, consumers: ConsumerManager, grpc_clients: GrpcClientTable | None,
                 pop_clients: Callable[[str, float], dict[str, str]], pop_groups: Callable[[float], Iterable[str]],
                 max_idle_s: Callable[[], float],
                 pop_agent: Callable[[str, str], ReceiverAgent | None] = lambda _group, _client: None) -> None:
        """``pop_clients(group, within_s)``: POP client id -> topic of its last receive, for those
        that received within ``within_s``; ``pop_groups(within_s)``: groups with such clients;
        ``max_idle_s()``: how long a client stays online after it was last heard of
        (``channelExpiredTimeout``, read each time: it can change live); ``pop_agent(group,
        client)``: what a remoting POP receiver's last request said of it, None if unknown."""
        self.consumers = consumers
        self.grpc_clients = grpc_clients
        self.pop_clients = pop_clients
        self.pop_groups = pop_groups
        self.max_idle_s = max_idle_s
        self.pop_agent = pop_agent

    def _live_grpc(self) -> list[GrpcClientView]:
        if self.grpc_clients is None:
            return []
        oldest = time.monotonic() - self.max_idle_s()
        return [c for c in self.grpc_clients.consumers() if c.last_seen >= oldest]

    def _remoting(self, group: str) -> list[OnlineClient]:
        """Heartbeating members; those of a group that heartbeats consumeType CONSUME_POP (Apache's
        5.x remoting POP consumers) are POP ones."""
        info = self.consumers.groups.get(group)
        if info is None:
            return []
        subs = {topic: sub.sub_string for topic, sub in sorted(info.subscriptions.items())}
        protocol = POP if info.consume_type == "CONSUME_POP" else REMOTING
        types = {topic: sub.expression_type for topic, sub in info.subscriptions.items()
                 if (sub.expression_type or "TAG").upper() != "TAG"}
        return [OnlineClient(ch.client_id, ch.client_addr, protocol, _language_name(ch.language), str(ch.version), subs,
                             types)
                for ch in info.channels.values()]

    def _grpc(self, group: str) -> list[OnlineClient]:
        return [OnlineClient(c.client_id, c.remote, GRPC, c.language or "OTHER", c.version, dict(c.subscriptions),
                             dict(c.filter_types))
                for c in self._live_grpc() if c.group == group]

    def _pop(self, group: str) -> list[OnlineClient]:
        # a remoting POP receiver is named by its connection's address (processors/pop.py)
        out = []
        for client_id, topic in self.pop_clients(group, self.max_idle_s()).items():
            agent = self.pop_agent(group, client_id)
            if agent is None:  # known by its receives only
                out.append(OnlineClient(client_id, client_id, POP, "OTHER", "", {topic: "*"}))
                continue
            types = {topic: agent.expression_type} if agent.expression_type != "TAG" else {}
            out.append(OnlineClient(client_id, client_id, POP, _language_name(agent.language), str(agent.version),
                                    {topic: agent.expression}, types))
        return out

    def of_group(self, group: str) -> list[OnlineClient]:
        """The group's online consumers, each once, sorted by protocol then client id."""
        seen: dict[str, OnlineClient] = {}
        known = self._remoting(group) + self._grpc(group)
        addresses = {c.address for c in known}
        # a POP receiver that also heartbeats (same connection) or speaks gRPC is listed once
        for client in known + [c for c in self._pop(group) if c.address not in addresses]:
            seen.setdefault(client.client_id, client)
        return sorted(seen.values(), key=lambda c: (PROTOCOLS.index(c.protocol), c.client_id))

    def groups(self) -> list[str]:
        names = set(self.consumers.groups)
        names |= {c.group for c in self._live_grpc()}
        names |= set(self.pop_groups(self.max_idle_s()))
        return sorted(names)

    def count_by_protocol(self) -> dict[str, dict[str, int]]:
        """group -> protocol -> online clients (every protocol present, 0 when none)."""
        out = {}
        for group in self.groups():
            counts = dict.fromkeys(PROTOCOLS, 0)
            for client in self.of_group(group):
                counts[client.protocol] += 1
            if any(counts.values()):
                out[group] = counts
        return out


class OnlineClientsCollector(Collector):
    """``ferrymq_broker_group_online_clients{group, protocol}``: online consumers of each group by
    protocol (remoting 4.x, gRPC v2 5.x, POP over remoting). Lag of every generation is
    ``ferrymq_broker_group_lag_messages``: POP acks commit the group's offset like pulls do."""

    def __init__(self, cluster: str, broker: str, online: OnlineClients) -> None:
        self.labels = [cluster, broker]
        self.online = online

    def collect(self) -> Iterator:
        family = GaugeMetricFamily("ferrymq_broker_group_online_clients",
                                   "Online consumers of a group, by protocol: remoting (4.x), gRPC v2 (5.x), "
                                   "POP (remoting POP receivers)", labels=["cluster", "broker", "group", "protocol"])
        for group, counts in self.online.count_by_protocol().items():
            for protocol, n in counts.items():
                family.add_metric(self.labels + [group, protocol], n)
        yield family
