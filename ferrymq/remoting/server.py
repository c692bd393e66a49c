"""A listening remoting endpoint that routes requests to processors by code."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from typing import Callable

from ferrymq.remoting.codes import DEFAULT_MAX_FRAME
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection, DispatchRounds, RequestHandler, not_supported
from ferrymq.remoting.tls import ServerTls
from ferrymq.remoting.tls_listener import TlsListener

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
        tls: ServerTls | None = None,
        max_idle_seconds: float = 0,
    ) -> None:
        self.host = host
        self.port = port  # replaced by the bound port in start(), which matters for 0
        self.name = name
        self.connections: set[Connection] = set()
        self._max_frame = max_frame
        self._processors: dict[int, RequestHandler] = {}
        self._eager_codes: set[int] = set()
        self._rounds: DispatchRounds | None = None
        self._default_processor: RequestHandler | None = None
        self._guard: RequestGuard | None = None
        self._open_listeners: list[ConnectionListener] = []
        self._close_listeners: list[ConnectionListener] = []
        self._server: asyncio.Server | None = None
        self._tls = tls
        self._tls_listener: TlsListener | None = None
        self._watches_certificate = True  # False for a mirror: its primary reloads the shared ServerTls
        self._certificate_reloader: asyncio.Task | None = None
        # RocketMQ's serverChannelMaxIdleTimeSeconds: a connection with no traffic this long is
        # closed (clients heartbeat every 30 s); 0 keeps idle connections.
        self.max_idle_seconds = max_idle_seconds
        self._idle_sweeper: asyncio.Task | None = None
        self._mirrors: list[RemotingServer] = []

    def register(self, code: int, processor: RequestHandler, *, eager: bool = False) -> None:
        """Serve ``code`` with ``processor``. ``eager``: run it as soon as its frame is read and
        make a task of it only if it waits (see common/eager.py for what such a processor must
        not do before it first waits); for sends, where a task per request was a large share
        of the cost."""
        self._processors[int(code)] = processor
        if eager:
            self._eager_codes.add(int(code))
        else:
            self._eager_codes.discard(int(code))

    def register_default(self, processor: RequestHandler) -> None:
        """Serve every code without a dedicated processor (RocketMQ's admin processor)."""
        self._default_processor = processor
        for mirror in self._mirrors:
            mirror.register_default(processor)

    def set_dispatch_rounds(self, rounds: DispatchRounds | None) -> None:
        """Tell ``rounds`` about each read that holds several requests (see DispatchRounds);
        applies to connections accepted from now on."""
        self._rounds = rounds
        for mirror in self._mirrors:
            mirror.set_dispatch_rounds(rounds)

    def set_request_guard(self, guard: RequestGuard | None) -> None:
        self._guard = guard
        for mirror in self._mirrors:
            mirror.set_request_guard(guard)

    def mirror(self, port: int, name: str) -> "RemotingServer":
        """Another listener serving exactly what this one serves (the same processors, guard
        and connection listeners, also those set later): RocketMQ's VIP channel on listenPort - 2."""
        other = RemotingServer(self.host, port, max_frame=self._max_frame, name=name, tls=self._tls,
                               max_idle_seconds=self.max_idle_seconds)
        other._processors = self._processors  # shared tables: registrations made later apply to both
        other._eager_codes = self._eager_codes
        other._rounds = self._rounds
        other._open_listeners = self._open_listeners
        other._close_listeners = self._close_listeners
        other._default_processor = self._default_processor
        other._guard = self._guard
        other._watches_certificate = False
        self._mirrors.append(other)
        return other

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
        if self._server is not None or self._tls_listener is not None:
            raise RuntimeError(f"{self.name} server already started")
        if self._tls is None:
            self._server = await asyncio.get_running_loop().create_server(self._new_connection, self.host, self.port)
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            self._tls_listener = TlsListener(self._tls, self._new_connection, self.name)
            self.port = await self._tls_listener.start(self.host, self.port)
        if self.max_idle_seconds > 0:
            self._idle_sweeper = asyncio.get_running_loop().create_task(self._close_idle(), name=f"{self.name}-idle")
        if self._tls is not None and self._tls.reload_interval > 0 and self._watches_certificate:
            self._certificate_reloader = asyncio.get_running_loop().create_task(
                self._tls.keep_reloading(self.name), name=f"{self.name}-certificate-reload")
        log.debug("%s server listening on %s:%d%s", self.name, self.host, self.port,
                  f" (TLS {self._tls.mode.value})" if self._tls else "")

    async def stop(self) -> None:
        """Stop listening, close every connection and wait for their tasks to end."""
        server, self._server = self._server, None
        listener, self._tls_listener = self._tls_listener, None
        if server is None and listener is None:
            return
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
            self._idle_sweeper = None
        await self._stop_certificate_reloader()
        if server is not None:
            server.close()
        if listener is not None:
            await listener.stop()
        connections = list(self.connections)
        await asyncio.gather(*(connection.close() for connection in connections))
        if server is not None:
            await server.wait_closed()
        log.debug("%s server on port %d stopped", self.name, self.port)

    async def _stop_certificate_reloader(self) -> None:
        reloader, self._certificate_reloader = self._certificate_reloader, None
        if reloader is not None:
            reloader.cancel()
            await asyncio.gather(reloader, return_exceptions=True)

    async def _close_idle(self) -> None:
        period = max(0.1, min(self.max_idle_seconds / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            deadline = time.monotonic() - self.max_idle_seconds
            for connection in [c for c in self.connections if c.last_active < deadline]:
                log.info("%s server: closing %r, idle for more than %g s", self.name, connection,
                         self.max_idle_seconds)
                await connection.close()

    def _new_connection(self) -> Connection:
        return Connection(self._dispatch, max_frame=self._max_frame, opened=self._accept,
                          eager_codes=self._eager_codes, rounds=self._rounds)

    def _accept(self, connection: Connection) -> None:
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
