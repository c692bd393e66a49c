"""The broker's gRPC listener: a grpcio asyncio server for ``MessagingService`` on
``grpcListenPort``, the announcement of its endpoint to the name servers, and client expiry.

``grpcTlsMode``: ``permissive`` (default: TLS and plaintext on the port, through the
first-byte switch of tls_switch.py in front of two loopback listeners), ``disabled``
(plaintext only, grpc on the port itself), ``enforcing`` (TLS only, grpc on the port itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

import grpc

from ferrymq.common.tasks import within
from ferrymq.grpc.certificates import server_credentials
from ferrymq.grpc.clients import GrpcClients
from ferrymq.grpc.protocol import rpc
from ferrymq.grpc.routes import RouteDirectory
from ferrymq.grpc.service import MessagingService
from ferrymq.grpc.tls_switch import TlsSwitch

log = logging.getLogger(__name__)

ANNOUNCE_PERIOD_S = 10.0
CLIENT_EXPIRY_PERIOD_S = 10.0


class GrpcEndpoint:
    def __init__(self, service: MessagingService, directory: RouteDirectory, clients: GrpcClients, *,
                 host: str, port: int, max_message_bytes: int, client_expiry_ms: Callable[[], int],
                 tls_mode: str = "permissive", cert_path: str = "", key_path: str = "",
                 cert_hosts: tuple[str, ...] = (), cert_reload_interval: float = 0.0) -> None:
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
        self._server: grpc.aio.Server | None = None
        self._switch: TlsSwitch | None = None
        self._tasks: list[asyncio.Task] = []
        self._announced = asyncio.Event()

    async def start(self) -> None:
        options = [("grpc.max_receive_message_length", self.max_message_bytes),
                   ("grpc.max_send_message_length", self.max_message_bytes),
                   ("grpc.so_reuseport", 0)]
        server = grpc.aio.server(options=options)
        rpc.add_MessagingServiceServicer_to_server(self.service, server)
        credentials = None
        if self.tls_mode != "disabled":
            credentials = await asyncio.to_thread(server_credentials, self.cert_path, self.key_path, self.cert_hosts,
                                                  self.cert_reload_interval)
        if self.tls_mode == "permissive":
            plain = server.add_insecure_port("127.0.0.1:0")
            secure = server.add_secure_port("127.0.0.1:0", credentials)
            await server.start()
            self._server = server
            self._switch = TlsSwitch(self.host, self.port, tls_port=secure, plain_port=plain)
            self.port = await self._switch.start()
            self.service.peer_of = self._switch.peer_of
        else:
            address = f"{self.host}:{self.port}"
            bound = (server.add_insecure_port(address) if credentials is None
                     else server.add_secure_port(address, credentials))
            if bound == 0:
                raise OSError(f"gRPC port {address} could not be bound")
            self.port = bound
            await server.start()
            self._server = server
        if self.service.trace is not None:
            self.service.trace.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._announce_loop(), name="grpc-announce"),
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
        if self._switch is not None:
            await self._switch.stop()
            self._switch = None
        if self._server is not None:
            # held ReceiveMessage calls get their grace second; then the listener closes
            await self._server.stop(grace=1.0)
            self._server = None
        if self.service.trace is not None:  # after the calls: what they reported is written first
            await self.service.trace.stop()
            with contextlib.suppress(Exception):
                await within(self.directory.withdraw(), 3.0)
