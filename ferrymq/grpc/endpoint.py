"""The broker's gRPC listener: a grpcio asyncio server for ``MessagingService`` on
``grpcListenPort``, the announcement of its endpoint to the name servers, and client expiry."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from ferrymq.grpc.clients import GrpcClients
from ferrymq.grpc.protocol import rpc
from ferrymq.grpc.routes import RouteDirectory
from ferrymq.grpc.service import MessagingService

log = logging.getLogger(__name__)

ANNOUNCE_PERIOD_S = 10.0
CLIENT_EXPIRY_PERIOD_S = 10.0


class GrpcEndpoint:
    def __init__(self, service: MessagingService, directory: RouteDirectory, clients: GrpcClients, *,
                 host: str, port: int, max_message_bytes: int, client_expiry_ms: "callable") -> None:
        self.service = service
        self.directory = directory
        self.clients = clients
        self.host = host
        self.port = port  # the bound port once started (0: a free one)
        self.max_message_bytes = max_message_bytes
        self.client_expiry_ms = client_expiry_ms
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task] = []
        self._announced = asyncio.Event()

    async def start(self) -> None:
        options = [("grpc.max_receive_message_length", self.max_message_bytes),
                   ("grpc.max_send_message_length", self.max_message_bytes),
                   ("grpc.so_reuseport", 0)]
        server = grpc.aio.server(options=options)
        rpc.add_MessagingServiceServicer_to_server(self.service, server)
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"gRPC port {self.host}:{self.port} could not be bound")
        self.port = bound
        await server.start()
        self._server = server
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._announce_loop(), name="grpc-announce"),
                       loop.create_task(self._expire_loop(), name="grpc-client-expiry")]
        log.info("gRPC endpoint (RocketMQ 5 clients) listening on %s:%d", self.host, self.port)

    async def wait_announced(self, timeout: float) -> bool:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._announced.wait(), timeout)
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
        if self._server is not None:
            # held ReceiveMessage calls get their grace second; then the listener closes
            await self._server.stop(grace=1.0)
            self._server = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.directory.withdraw(), 3.0)
