"""What producers, consumers and the admin client share: name-server routes, broker
connections and heartbeats. One instance per client object (RocketMQ's MQClientInstance).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from functools import partial
from typing import Callable

from ferrymq.acl.signature import sign_request
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import BrokerUnreachableError, MQBrokerError, MQClientError, NoRouteError
from ferrymq.common.address_lookup import changed_namesrv_addr
from ferrymq.common.tasks import TaskSet, within
from ferrymq.common.protocol import (
    DEFAULT_TOPIC,
    ConsumerData,
    MASTER_ID,
    HeartbeatData,
    ProducerData,
    TopicRouteData,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.errors import RemotingConnectionError, RemotingError
from ferrymq.remoting.headers import GetRouteInfoHeader, UnregisterClientHeader

log = logging.getLogger(__name__)


class ClientInstance:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        sign = partial(sign_request, credentials=config.credentials) if config.credentials else None
        self.remoting = RemotingClient(request_handler=self._on_request, serialize_type=config.serialize_type,
                                       request_hook=sign, tls=config.tls.context() if config.tls else None)
        self.routes: dict[str, TopicRouteData] = {}
        # Topics whose cached route a name server has since denied (TOPIC_NOT_EXIST): kept, as
        # Java's client keeps it, but asked about again before each use (see ``route``).
        self._denied: set[str] = set()
        self.watched_topics: set[str] = set()  # routes refreshed even before first use
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producer_groups: set[str] = set()
        self.consumer_data: dict[str, ConsumerData] = {}
        self.request_handlers: dict[int, Callable] = {}
        self._namesrv_index = random.randrange(1 << 16)
        self._tasks = TaskSet("client instance", log)
        self._refreshing: set[str] = set()
        self._route_queries: dict[str, asyncio.Future] = {}  # topic -> the name-server query under way
        self._route_read = asyncio.Event()  # set (and replaced) whenever a route was read
        # Connect back-off: after a failed connect, calls to that address fail fast until
        # this time, doubling up to 30 s, so a dead broker is not hammered.
        self._down_until: dict[str, float] = {}
        self._down_backoff: dict[str, float] = {}
        self._started = False
        self._namesrv_from_service = not config.namesrv_addr and bool(config.namesrv_domain)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        quiet = (RemotingError, MQClientError, OSError)  # a name server or broker away for a while
        if self._namesrv_from_service:
            await self.fetch_namesrv_addr()
            self._tasks.every(self.config.fetch_namesrv_interval, self.fetch_namesrv_addr, "namesrv-addr-fetch")
        self._tasks.every(self.config.poll_name_server_interval, self.refresh_routes, "route-refresh", quiet=quiet)
        self._tasks.every(self.config.heartbeat_broker_interval, self.send_heartbeats, "heartbeat", quiet=quiet)

    async def close(self) -> None:
        await self._tasks.close()
        await self.remoting.close()
        self._started = False

    # ------------------------------------------------------------------ calls

    async def invoke_namesrv(self, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send to one name server, sticky until it fails, then the next."""
        addrs = self.config.namesrv_addresses()
        if not addrs and self._namesrv_from_service:
            await self.fetch_namesrv_addr()
            addrs = self.config.namesrv_addresses()
        if not addrs:
            raise MQClientError("no name server address (set --namesrv or NAMESRV_ADDR, or an address service "
                                "with FERRYMQ_NAMESRV_DOMAIN)")
        last_error: Exception | None = None
        for attempt in range(len(addrs)):
            addr = addrs[(self._namesrv_index + attempt) % len(addrs)]
            try:
                response = await self.remoting.invoke(addr, request, timeout or self.config.api_timeout)
                self._namesrv_index = (self._namesrv_index + attempt) % len(addrs)
                return response
            except (RemotingError, OSError) as e:
                last_error = e  # the next attempt gets a new opaque from invoke()
        raise MQClientError(f"no name server reachable ({', '.join(addrs)}): {last_error}")

    async def fetch_namesrv_addr(self) -> None:
        """Ask the address service for the name servers; keep the last list when it has none."""
        addr = await changed_namesrv_addr(self.config.namesrv_domain, self.config.namesrv_domain_subgroup,
                                          self.config.namesrv_addr)
        if addr:
            self.config.namesrv_addr = addr

    async def invoke_broker(self, addr: str, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        down_until = self._down_until.get(addr, 0.0)
        if down_until > time.monotonic():
            raise BrokerUnreachableError(f"broker {addr} was unreachable; next attempt in "
                                         f"{down_until - time.monotonic():.1f}s")
        started = time.monotonic()
        try:
            response = await self.remoting.invoke(addr, request, timeout or self.config.api_timeout)
        except RemotingConnectionError as e:
            # Calls that were under way together fail together: one failure doubles the back-off,
            # not each of them (ten sends at a broker restarting must not push it to 30 s).
            if self._down_until.get(addr, 0.0) <= started:
                backoff = min(self._down_backoff.get(addr, 0.25) * 2, 30.0)
                self._down_backoff[addr] = backoff
                self._down_until[addr] = time.monotonic() + backoff
            raise BrokerUnreachableError(f"broker {addr}: {e}") from e
        except (RemotingError, OSError) as e:
            raise MQClientError(f"broker {addr}: {e}") from e
        self._down_until.pop(addr, None)
        self._down_backoff.pop(addr, None)
        return response

    async def invoke_broker_oneway(self, addr: str, request: RemotingCommand) -> None:
        try:
            await self.remoting.invoke_oneway(addr, request, self.config.api_timeout)
        except (RemotingError, OSError) as e:
            raise MQClientError(f"broker {addr}: {e}") from e

    # ------------------------------------------------------------------ routes

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask a name server; None when the topic does not exist there. A route cached before
        stays (a name server that restarted answers so until the brokers registered again), but
        is marked denied: ``route`` asks again before each use."""
        response = await self.invoke_namesrv(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                     GetRouteInfoHeader(topic=topic).to_ext_fields()))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            if topic in self.routes:
                self._denied.add(topic)
            return None
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        route = TopicRouteData.from_json(response.body or b"{}")
        self.routes[topic] = route
        self._denied.discard(topic)
        known = self.broker_addresses()
        for broker in route.broker_datas:
            self.broker_addrs[broker.broker_name] = dict(broker.broker_addrs)
        self._greet(self.broker_addresses() - known)
        read, self._route_read = self._route_read, asyncio.Event()
        read.set()
        return route

    async def refresh_route(self, topic: str) -> TopicRouteData | None:
        """Read a topic's route from a name server now; callers at the same moment share one query."""
        query = self._route_queries.get(topic)
        if query is None:
            query = self._route_queries[topic] = asyncio.ensure_future(self.fetch_route(topic))
            query.add_done_callback(partial(self._route_query_done, topic))
        return await asyncio.shield(query)

    def _route_query_done(self, topic: str, query: asyncio.Future) -> None:
        self._route_queries.pop(topic, None)
        if not query.cancelled():
            query.exception()  # retrieved: every caller that still waits gets it from the shield

    async def route_read(self, timeout: float) -> bool:
        """Wait until some route is read from a name server (by anyone), at most ``timeout`` s."""
        try:
            await within(self._route_read.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            return False
        return True

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRouteData | None:
        """The cached route, read first when there is none. A route a name server denied since it
        was cached is read again first (callers at the same moment share one query): the topic
        may have been deleted and created on other brokers. While the name server still denies
        it, or cannot be reached, the cached route is used until a broker refuses the topic
        (``forget_route``)."""
        if refresh or topic not in self.routes:
            return await self.fetch_route(topic)
        if topic in self._denied:
            with contextlib.suppress(MQClientError, RemotingError, OSError):
                fresh = await self.refresh_route(topic)
                if fresh is not None:
                    return fresh
        return self.routes.get(topic)

    def forget_route(self, topic: str) -> None:
        """A broker of the route answered that it has no such topic: drop the route, so the
        next use reads it again (or, still unknown, falls back as an unknown topic does)."""
        self.routes.pop(topic, None)
        self._denied.discard(topic)

    async def default_topic_route(self) -> TopicRouteData | None:
        return await self.route(DEFAULT_TOPIC)

    def schedule_route_refresh(self, topic: str) -> None:
        """Re-read a topic's route soon (a broker failed); at most one refresh in flight."""
        if topic in self._refreshing:
            return
        self._refreshing.add(topic)

        async def refresh() -> None:
            try:
                await self.fetch_route(topic)
            except (MQClientError, RemotingError):
                pass
            finally:
                self._refreshing.discard(topic)

        self._tasks.spawn(refresh(), name=f"route-refresh-{topic}")

    async def refresh_routes(self) -> None:
        for topic in sorted(set(self.routes) | self.watched_topics):
            with contextlib.suppress(MQClientError, RemotingError):
                await self.fetch_route(topic)

    def broker_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(0)

    async def find_broker_addr(self, broker_name: str, topic: str | None = None) -> str:
        addr = self.broker_addr(broker_name)
        if addr is None and topic:
            await self.fetch_route(topic)
            addr = self.broker_addr(broker_name)
        if addr is None:
            raise NoRouteError(f"broker {broker_name} is not in any known route" + (f" (topic {topic})" if topic else ""))
        return addr

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.config.client_id,
            producer_data_set=[ProducerData(g) for g in sorted(self.producer_groups)],
            consumer_data_set=list(self.consumer_data.values()),
        )

    def find_broker_in_subscribe(self, broker_name: str, broker_id: int) -> tuple[str, bool] | None:
        """Where to pull from (RocketMQ's findBrokerAddressInSubscribe, not only that broker):
        ``broker_id``'s address in the group, else the next slave's, else any broker of the
        group (the master first); with whether that broker is a slave. None if none is known."""
        addrs = self.broker_addrs.get(broker_name) or {}
        chosen = broker_id if broker_id in addrs else None
        if chosen is None and broker_id != MASTER_ID and broker_id + 1 in addrs:
            chosen = broker_id + 1
        if chosen is None and addrs:
            chosen = min(addrs)
        return None if chosen is None else (addrs[chosen], chosen != MASTER_ID)

    async def find_subscribe_addr(self, broker_name: str, broker_id: int, topic: str) -> tuple[str, bool]:
        """:meth:`find_broker_in_subscribe`, reading the topic's route again when nothing is known."""
        found = self.find_broker_in_subscribe(broker_name, broker_id)
        if found is None:
            await self.fetch_route(topic)
            found = self.find_broker_in_subscribe(broker_name, broker_id)
        if found is None:
            raise MQClientError(f"broker {broker_name} is not in any known route")
        return found

    def broker_addresses(self) -> set[str]:
        """Every broker address of every route this client knows."""
        return {a for addrs in self.broker_addrs.values() for a in addrs.values()}

    def _greet(self, addrs: set[str]) -> None:
        """Brokers a route names for the first time hear this client's heartbeat now, not at the
        next periodic one: a consumer that started before its topic existed is otherwise unknown
        to the topic's brokers (no queues for it) for up to a heartbeat interval."""
        if addrs and self._started and (self.producer_groups or self.consumer_data):
            self._tasks.spawn(self.send_heartbeats(addrs), name="heartbeat-new-brokers")

    async def send_heartbeats(self, addrs: set[str] | None = None) -> None:
        """Tell ``addrs`` (default: every known broker) this client's groups and subscriptions."""
        if not self.producer_groups and not self.consumer_data:
            return
        body = self.heartbeat_data().to_json()
        for addr in sorted(self.broker_addresses() if addrs is None else addrs):
            try:
                await self.invoke_broker(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
            except MQClientError as e:
                log.debug("heartbeat to %s failed: %s", addr, e)

    async def unregister(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        request = UnregisterClientHeader(client_id=self.config.client_id, producer_group=producer_group,
                                         consumer_group=consumer_group).to_ext_fields()
        for addr in self.broker_addresses():
            with contextlib.suppress(MQClientError):
                await self.invoke_broker(addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, request))

    # ------------------------------------------------------------------ requests from brokers

    async def _on_request(self, request: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        handler = self.request_handlers.get(request.code)
        if handler is None:
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {request.code} not supported")
        return await handler(request, conn)

