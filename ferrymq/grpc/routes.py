"""Topic routes for v2 clients: the name servers' route, with each broker's gRPC endpoint.

A route names brokers by their remoting address; a v2 client needs each broker's gRPC
endpoint. Every broker with gRPC on announces its endpoint to its name servers as a KV
config entry (namespace ``FERRYMQ_GRPC_ENDPOINTS``, key its remoting address, value
``host:port``), re-announced with every registration round, so any broker can tell clients
its peers' endpoints. Name servers keep KV entries in memory only; the next round restores
them after a name-server restart. A broker without an entry (gRPC off) is left out of v2
routes: a v2 client could not reach it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ferrymq.common.protocol import MASTER_ID, KVTable, Perm, QueueData, TopicRouteData
from ferrymq.grpc.protocol import pb
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import GetRouteInfoHeader, KVConfigHeader, KVListHeader, PutKVConfigHeader

log = logging.getLogger(__name__)

ENDPOINTS_NAMESPACE = "FERRYMQ_GRPC_ENDPOINTS"
ENDPOINTS_TTL_S = 5.0  # how long a fetched endpoint table is reused
ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


class RouteUnavailable(Exception):
    """No name server answered (the message says why)."""


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    try:
        scheme = pb.AddressScheme.IPv4 if ipaddress.ip_address(host).version == 4 else pb.AddressScheme.IPv6
    except ValueError:
        scheme = pb.AddressScheme.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def parse_endpoint(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def queue_permissions(queue: QueueData) -> list[int]:
    """Per queue id, its v2 permission (read queues and write queues may differ in number)."""
    out = []
    for i in range(max(queue.read_queue_nums, queue.write_queue_nums)):
        readable = i < queue.read_queue_nums and Perm.readable(queue.perm)
        writable = i < queue.write_queue_nums and Perm.writeable(queue.perm)
        out.append(pb.Permission.READ_WRITE if readable and writable else pb.Permission.READ if readable
                   else pb.Permission.WRITE if writable else pb.Permission.NONE)
    return out


@dataclass
class RouteDirectory:
    """Routes and gRPC endpoints from the broker's name servers."""

    client: RemotingClient
    namesrv_addresses: Callable[[], list[str]]
    own_remoting_address: Callable[[], str]
    own_endpoint: Callable[[], tuple[str, int]]
    timeout: float = 3.0

    def __post_init__(self) -> None:
        self._endpoints: dict[str, tuple[str, int]] = {}
        self._fetched_at = float("-inf")
        self._fetch_lock = asyncio.Lock()

    async def announce(self) -> int:
        """Tell every name server this broker's gRPC endpoint; how many took it."""
        host, port = self.own_endpoint()
        header = PutKVConfigHeader(namespace=ENDPOINTS_NAMESPACE, key=self.own_remoting_address(), value=f"{host}:{port}")
        request = lambda: header.request(RequestCode.PUT_KV_CONFIG)  # noqa: E731
        addrs = self.namesrv_addresses()
        results = await asyncio.gather(*(self.client.invoke(a, request(), self.timeout) for a in addrs),
                                       return_exceptions=True)
        ok = 0
        for addr, result in zip(addrs, results):
            if isinstance(result, BaseException):
                log.warning("announcing the gRPC endpoint to name server %s failed: %s", addr, result)
            elif result.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused the gRPC endpoint: %s", addr, result.remark)
            else:
                ok += 1
        return ok

    async def withdraw(self) -> None:
        for addr in self.namesrv_addresses():
            try:
                header = KVConfigHeader(namespace=ENDPOINTS_NAMESPACE, key=self.own_remoting_address())
                await self.client.invoke(addr, header.request(RequestCode.DELETE_KV_CONFIG), self.timeout)
            except (RemotingError, OSError, asyncio.TimeoutError) as exc:
                log.debug("withdrawing the gRPC endpoint from %s failed: %s", addr, exc)

    async def _invoke_any(self, request: Callable[[], RemotingCommand]) -> RemotingCommand:
        errors = []
        for addr in self.namesrv_addresses():
            try:
                return await self.client.invoke(addr, request(), self.timeout)
            except (RemotingError, OSError, asyncio.TimeoutError) as exc:
                errors.append(f"{addr}: {exc or type(exc).__name__}")
        raise RouteUnavailable("no name server answered (" + "; ".join(errors or ["none configured"]) + ")")

    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route, None when no name server knows the topic."""
        response = await self._invoke_any(lambda: GetRouteInfoHeader(topic=topic).request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise RouteUnavailable(f"name server answered {response.code}: {response.remark}")
        return TopicRouteData.from_json(response.body or b"{}")

    async def invoke_broker(self, topic: str, broker_name: str, request: RemotingCommand) -> RemotingCommand | None:
        """``request`` sent to the master of ``broker_name`` found in ``topic``'s route; None when
        the route names no such master. RouteUnavailable, RemotingError as the calls raise them."""
        route = await self.route(topic)
        broker = next((b for b in (route.broker_datas if route else []) if b.broker_name == broker_name), None)
        address = broker.broker_addrs.get(0) if broker is not None else None
        if address is None:
            return None
        return await self.client.invoke(address, request, self.timeout)

    async def endpoints(self) -> dict[str, tuple[str, int]]:
        """Remoting address -> gRPC endpoint of every broker that announced one (and this one)."""
        async with self._fetch_lock:
            if time.monotonic() - self._fetched_at > ENDPOINTS_TTL_S:
                table: dict[str, tuple[str, int]] = {}
                try:
                    response = await self._invoke_any(lambda: KVListHeader(namespace=ENDPOINTS_NAMESPACE).request(
                        RequestCode.GET_KVLIST_BY_NAMESPACE))
                    if response.code == ResponseCode.SUCCESS and response.body:
                        for key, value in KVTable.from_json(response.body).table.items():
                            endpoint = parse_endpoint(value)
                            if endpoint:
                                table[key] = endpoint
                except RouteUnavailable as exc:
                    log.warning("gRPC endpoints of peer brokers unknown: %s", exc)
                self._endpoints = table
                self._fetched_at = time.monotonic()
            table = dict(self._endpoints)
        table[self.own_remoting_address()] = self.own_endpoint()
        return table

    async def brokers(self, route: TopicRouteData) -> dict[str, pb.Broker]:
        """Broker name -> v2 Broker (its master, with its gRPC endpoint) for the route's masters
        that serve gRPC."""
        endpoints = await self.endpoints()
        out = {}
        for data in route.broker_datas:
            addr = data.broker_addrs.get(MASTER_ID)
            endpoint = endpoints.get(addr) if addr else None
            if endpoint is not None:
                out[data.broker_name] = pb.Broker(name=data.broker_name, id=MASTER_ID, endpoints=endpoints_of(*endpoint))
        return out


def message_queues(topic: str, route: TopicRouteData, brokers: dict[str, pb.Broker]) -> list[pb.MessageQueue]:
    """QueryRoute's queues: every queue of every broker a v2 client can reach."""
    out = []
    for queue in sorted(route.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(queue.broker_name)
        if broker is None:
            continue
        for queue_id, permission in enumerate(queue_permissions(queue)):
            out.append(pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, permission=permission,
                                       broker=broker, accept_message_types=ACCEPTED_TYPES))
    return out


def assignments(topic: str, route: TopicRouteData, brokers: dict[str, pb.Broker], fifo: bool) -> list[pb.Assignment]:
    """QueryAssignment: a normal group gets one assignment per readable broker, queue id -1
    (receive from any queue there); a FIFO group gets every readable queue."""
    out = []
    for queue in sorted(route.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(queue.broker_name)
        if broker is None or not Perm.readable(queue.perm) or queue.read_queue_nums <= 0:
            continue
        ids = range(queue.read_queue_nums) if fifo else [-1]
        for queue_id in ids:
            out.append(pb.Assignment(message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=queue_id, permission=pb.Permission.READ_WRITE, broker=broker,
                accept_message_types=ACCEPTED_TYPES)))
    return out
