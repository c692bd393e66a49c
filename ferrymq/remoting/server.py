"""A listening remoting endpoint that routes requests to processors by code."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ferrymq.remoting.codes import DEFAULT_MAX_FRAME
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection, RequestHandler, not_supported

log = logging.getLogger(__name__)

ConnectionListener = Callable[[Connection], None]
# Runs before any processor (RocketMQ's RPC hook on the server side, e.g. the ACL): None lets
# the request through, a command is the answer instead. Gets the request and the peer's host.
RequestGuard = Callable[[RemotingCommand, str], "RemotingCommand | None"]


class RemotingServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str = "remoting",
    ) -> None:
        self.host = host
        self.port = port  # replaced by the bound port in start(), which matters for 0
        self.name = name
        self.connections: set[Connection] = set()
        self._max_frame = max_frame
        self._processors: dict[int, RequestHandler] = {}
        self._default_processor: RequestHandler | None = None
        self._guard: RequestGuard | None = None
        self._open_listeners: list[ConnectionListener] = []
        self._close_listeners: list[ConnectionListener] = []
        self._server: asyncio.Server | None = None

    def register(self, code: int, processor: RequestHandler) -> None:
        self._processors[int(code)] = processor

    def register_default(self, processor: RequestHandler) -> None:
        """Serve every code without a dedicated processor (RocketMQ's admin processor)."""
        self._default_processor = processor

    def set_request_guard(self, guard: RequestGuard | None) -> None:
        self._guard = guard

    def add_connection_listener(
        self,
        on_open: ConnectionListener | None = None,
        on_close: ConnectionListener | None = None,
    ) -> None:
        if on_open is not None:
            self._open_listeners.append(on_open)
        if on_close is not None:
            self._close_listeners.append(on_close)

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{self.name} server already started")
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.debug("%s server listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection and wait for their tasks to end."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        connections = list(self.connections)
        await asyncio.gather(*(connection.close() for connection in connections))
        await server.wait_closed()
        log.debug("%s server on port %d stopped", self.name, self.port)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(reader, writer, self._dispatch, max_frame=self._max_frame)
        self.connections.add(connection)
        connection.add_close_listener(self._on_connection_closed)
        log.debug("%s server accepted %r", self.name, connection)
        self._notify(self._open_listeners, connection)

    def _on_connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self._notify(self._close_listeners, connection)

    def _notify(self, listeners: list[ConnectionListener], connection: Connection) -> None:
        for listener in listeners:
            try:
                listener(connection)
            except Exception:
                log.warning("%s server: connection listener failed", self.name, exc_info=True)

    async def _dispatch(self, request: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        if self._guard is not None:
            refusal = self._guard(request, connection.remote_address[0])
            if refusal is not None:
                return refusal
        processor = self._processors.get(request.code, self._default_processor)
        if processor is None:
            return not_supported(request)
        return await processor(request, connection)
