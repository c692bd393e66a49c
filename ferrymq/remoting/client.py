"""Outgoing remoting connections, one cached per "host:port" address."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from functools import partial
from typing import Callable

from ferrymq.common.tasks import within
from ferrymq.remoting.codes import DEFAULT_MAX_FRAME, SerializeType
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import (
    DEFAULT_PERMITS,
    Connection,
    RequestHandler,
    ResponseCallback,
    deliver_outcome,
    open_connection,
)
from ferrymq.remoting.errors import RemotingConnectionError, RemotingTimeoutError

log = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """Split "host:port" (IPv6 as "[::1]:9876") into host and port."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"remoting address must look like host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class RemotingClient:
    """Connects on demand and keeps one connection per address.

    `serialize_type` is the header serialization of every request sent through this
    client (the equivalent of Java's rocketmq.serialize.type setting); it overrides the
    request's own field. `request_handler` serves the requests brokers send back.
    `request_hook` sees every outgoing request last, just before it is sent (Java's
    RPCHook.doBeforeRequest: the ACL signature). With `tls` every connection speaks TLS.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        request_handler: RequestHandler | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
        async_permits: int = DEFAULT_PERMITS,
        oneway_permits: int = DEFAULT_PERMITS,
        request_hook: Callable[[RemotingCommand], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self._tls = tls
        self._request_hook = request_hook
        self.serialize_type = serialize_type
        self._max_frame = max_frame
        self._request_handler = request_handler
        self._permits = {"async_permits": async_permits, "oneway_permits": oneway_permits}
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    async def connection(self, address: str) -> Connection:
        """The open connection to `address`, connecting (once, for all callers) if needed."""
        if self._closed:
            raise RemotingConnectionError("remoting client is closed")
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        attempt = self._connecting.get(address)
        if attempt is None:
            attempt = asyncio.get_running_loop().create_task(self._connect(address), name=f"connect {address}")
            self._connecting[address] = attempt
            attempt.add_done_callback(partial(self._connect_done, address))
        try:
            # Shielded: one caller giving up must not cancel the attempt the others share.
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if attempt.cancelled() and current is not None and not current.cancelling():
                raise RemotingConnectionError(f"connect to {address} abandoned: client closed") from None
            raise

    async def invoke(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Like Java, connecting counts against `timeout`. As Java's invokeSync does
        (clientCloseSocketIfTimeout), a request left unanswered closes the connection, here only
        when the peer sent nothing at all meanwhile: a frozen or partitioned broker must not keep
        holding the next requests, which connect again instead, while a busy one still answering
        other requests keeps the connection they share."""
        connection, remaining = await self._connection_within(address, timeout)
        self._prepare(request)
        sent = time.monotonic()
        try:
            return await connection.invoke(request, remaining)
        except RemotingTimeoutError:
            if connection.last_received < sent and self._connections.get(address) is connection:
                log.info("nothing from %s for %.1fs: closing the connection", address, timeout)
                await connection.close()
            raise

    def invoke_async(
        self,
        address: str,
        request: RemotingCommand,
        timeout: float = 3.0,
        callback: ResponseCallback | None = None,
    ) -> asyncio.Future[RemotingCommand]:
        """Connection.invoke_async on the cached connection; if there is none yet, the
        returned future is a task that connects first."""
        self._prepare(request)
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection.invoke_async(request, timeout, callback)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_task(
            self._connect_then_invoke(address, request, timeout)
        )
        if callback is not None:
            future.add_done_callback(partial(deliver_outcome, callback))
        return future

    async def invoke_oneway(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        connection = await self.connection(address)
        self._prepare(request)
        await connection.invoke_oneway(request, timeout)

    def address_of(self, connection: Connection) -> str | None:
        """The address this client dialled for ``connection``; None if it is not one of its own."""
        return next((address for address, c in self._connections.items() if c is connection), None)

    def _prepare(self, request: RemotingCommand) -> None:
        request.serialize_type = self.serialize_type
        if self._request_hook is not None:
            self._request_hook(request)

    async def close(self) -> None:
        self._closed = True
        for attempt in self._connecting.values():
            attempt.cancel()
        await asyncio.gather(*self._connecting.values(), return_exceptions=True)
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(connection.close() for connection in connections))

    async def _connect_then_invoke(self, address: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        connection, remaining = await self._connection_within(address, timeout)
        return await connection.invoke_async(request, remaining)

    async def _connection_within(self, address: str, timeout: float) -> tuple[Connection, float]:
        """The connection, and how much of `timeout` is left after getting it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        connection = await self.connection(address)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RemotingTimeoutError(f"request to {address}: connecting used up the {timeout}s timeout")
        return connection, remaining

    async def _connect(self, address: str) -> Connection:
        host, port = parse_address(address)
        try:
            connection = await within(
                open_connection(host, port, self._request_handler, ssl=self._tls,
                                server_hostname=host if self._tls else None, max_frame=self._max_frame,
                                **self._permits),
                self.connect_timeout)
        except TimeoutError:
            raise RemotingConnectionError(f"connect to {address} timed out after {self.connect_timeout}s") from None
        except (OSError, ssl.SSLError) as exc:
            raise RemotingConnectionError(f"connect to {address} failed: {exc or type(exc).__name__}") from exc
        if self._closed:  # close() ran while we were connecting
            await connection.close()
            raise RemotingConnectionError("remoting client is closed")
        self._connections[address] = connection
        connection.add_close_listener(partial(self._forget, address))
        log.debug("connected to %s", address)
        return connection

    def _connect_done(self, address: str, attempt: asyncio.Task[Connection]) -> None:
        if self._connecting.get(address) is attempt:
            del self._connecting[address]
        if not attempt.cancelled():
            attempt.exception()  # retrieved here: callers may all have given up on it

    def _forget(self, address: str, connection: Connection) -> None:
        if self._connections.get(address) is connection:
            del self._connections[address]

