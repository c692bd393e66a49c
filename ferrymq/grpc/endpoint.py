"""The broker's gRPC listener: ``MessagingService`` on ``grpcListenPort`` (gRPC on FerryMQ's
own HTTP/2, server.py), the announcement of its endpoint to the name servers, and client expiry.

``grpcTlsMode``: ``permissive`` (default: TLS and plaintext on the port, told apart by each
connection's first byte), ``disabled`` (plaintext only), ``enforcing`` (TLS only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

from ferrymq.common.tasks import within
from ferrymq.grpc.certificates import server_tls
from ferrymq.grpc.clients import GrpcClients
from ferrymq.grpc.protocol import spb
from ferrymq.grpc.routes import RouteDirectory
from ferrymq.grpc.server import GrpcServer, service_methods
from ferrymq.grpc.service import MessagingService
from ferrymq.remoting.connection import DispatchRounds
from ferrymq.remoting.tls_listener import TlsListener

log = logging.getLogger(__name__)

ANNOUNCE_PERIOD_S = 10.0
STOP_GRACE_S = 1.0  # held ReceiveMessage calls get this long to end when the broker stops
# answered on the read that completed them, a task only if they wait (the send path is made for it)
EAGER_METHODS = frozenset({"SendMessage"})
CLIENT_EXPIRY_PERIOD_S = 10.0


class GrpcEndpoint:
    def __init__(self, service: MessagingService, directory: RouteDirectory, clients: GrpcClients, *,
                 host: str, port: int, max_message_bytes: int, client_expiry_ms: Callable[[], int],
                 tls_mode: str = "permissive", cert_path: str = "", key_path: str = "",
                 cert_hosts: tuple[str, ...] = (), cert_reload_interval: float = 0.0,
                 rounds: DispatchRounds | None = None) -> None:
        self.service = service
        self.directory = directory
        self.clients = clients
        self.host = host
        self.port = port  # the bound port once started (0: a free one)
        self.max_message_bytes = max_message_bytes
        self.client_expiry_ms = client_expiry_ms
        self.tls_mode = tls_mode
        self.cert_path, self.key_path, self.cert_hosts = cert_path, key_path, list(cert_hosts)
        self.cert_reload_interval = cert_reload_interval  # seconds; 0: the files are read once
        self.rounds = rounds  # the store's dispatch rounds: the sends of one read written together
        self._server: GrpcServer | None = None
        self._plain: asyncio.Server | None = None
        self._listener: TlsListener | None = None
        self._tasks: list[asyncio.Task] = []
        self._announced = asyncio.Event()

    async def start(self) -> None:
        descriptor = spb.DESCRIPTOR.services_by_name["MessagingService"]
        server = GrpcServer(service_methods(self.service, descriptor, spb, EAGER_METHODS), self.max_message_bytes,
                            self.rounds)
        loop = asyncio.get_running_loop()
        tasks = []
        if self.tls_mode == "disabled":
            self._plain = await loop.create_server(server.connection, self.host, self.port)
            self.port = self._plain.sockets[0].getsockname()[1]
        else:
            tls = await asyncio.to_thread(server_tls, self.tls_mode, self.cert_path, self.key_path, self.cert_hosts,
                                          self.cert_reload_interval)
            self._listener = TlsListener(tls, server.connection, "gRPC")
            self.port = await self._listener.start(self.host, self.port)
            if tls.reload_interval > 0:
                tasks.append(loop.create_task(tls.keep_reloading("gRPC"), name="grpc-certificate-reload"))
        self._server = server
        if self.service.trace is not None:
            self.service.trace.start()
        self._tasks = [*tasks, loop.create_task(self._announce_loop(), name="grpc-announce"),
                       loop.create_task(self._expire_loop(), name="grpc-client-expiry")]
        log.info("gRPC endpoint (RocketMQ 5 clients) listening on %s:%d, TLS %s", self.host, self.port,
                 {"permissive": "and plaintext", "disabled": "off", "enforcing": "only"}[self.tls_mode])

    async def wait_announced(self, timeout: float) -> bool:
        with contextlib.suppress(asyncio.TimeoutError):
            await within(self._announced.wait(), timeout)
        return self._announced.is_set()

    async def _announce_loop(self) -> None:
        retry = 0.5
        while True:
            ok = await self.directory.announce() if self.directory.namesrv_addresses() else 0
            if ok:
                self._announced.set()
            await asyncio.sleep(ANNOUNCE_PERIOD_S if ok else retry)
            retry = ANNOUNCE_PERIOD_S if ok else min(retry * 2, ANNOUNCE_PERIOD_S)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_EXPIRY_PERIOD_S)
            for client_id in self.clients.expire(self.client_expiry_ms() / 1000):
                log.info("gRPC client %s expired (no heartbeat)", client_id)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._plain is not None:  # no new connections
            self._plain.close()
        if self._listener is not None:
            await self._listener.stop()
        if self._server is not None:
            await self._server.stop(grace=STOP_GRACE_S)
            self._server = None
        if self._plain is not None:
            await self._plain.wait_closed()
            self._plain = None
        self._listener = None
        if self.service.trace is not None:  # after the calls: what they reported is written first
            await self.service.trace.stop()
            with contextlib.suppress(Exception):
                await within(self.directory.withdraw(), 3.0)
