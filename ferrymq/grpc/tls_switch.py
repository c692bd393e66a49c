"""TLS and plaintext gRPC on one port. grpcio cannot tell them apart on one listener, so in
``permissive`` mode this small switch owns the public port: it reads a connection's first
byte (0x16 opens a TLS handshake) and relays the connection, bytes as they come, to one of two
grpc listeners on loopback (TLS or plaintext). It remembers which client each relayed
connection carries, so the service still sees the real peer address.

Relaying is done with asyncio protocols (no task per connection, no copy into coroutines):
each side's data is written to the other's transport, and a side whose peer's write buffer is
full stops reading until it drains.
"""

from __future__ import annotations

import asyncio
import logging

from ferrymq.remoting.tls import TLS_RECORD_HANDSHAKE

log = logging.getLogger(__name__)

HIGH_WATER = 1 << 20


class _Upstream(asyncio.Protocol):
    """The switch's connection to a loopback grpc listener: what it receives goes back to the client."""

    def __init__(self, client: "_Client") -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc) -> None:
        self.client.transport.close()

    def pause_writing(self) -> None:  # the listener is slow: stop reading the client
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()


class _Client(asyncio.Protocol):
    """A client connection on the public port."""

    def __init__(self, switch: "TlsSwitch") -> None:
        self.switch = switch
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.pending: list[bytes] = []
        self.connecting: asyncio.Task | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER)
        self.switch.clients.add(self)

    def data_received(self, data: bytes) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.write(data)
            return
        self.pending.append(data)
        if self.connecting is None:
            port = self.switch.tls_port if data[0] == TLS_RECORD_HANDSHAKE else self.switch.plain_port
            self.transport.pause_reading()  # until the upstream connection exists
            self.connecting = asyncio.get_running_loop().create_task(self._connect(port))

    async def _connect(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, upstream = await loop.create_connection(lambda: _Upstream(self), "127.0.0.1", port)
        except OSError as exc:
            log.warning("gRPC switch: loopback listener %d unreachable: %s", port, exc)
            self.transport.close()
            return
        if self.closed:
            transport.close()
            return
        self.upstream = upstream
        local_port = transport.get_extra_info("sockname")[1]
        self.switch.peers[local_port] = self.transport.get_extra_info("peername")[:2]
        self.local_port = local_port
        transport.write(b"".join(self.pending))
        self.pending.clear()
        self.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.switch.clients.discard(self)
        self.switch.peers.pop(getattr(self, "local_port", None), None)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def pause_writing(self) -> None:  # the client is slow: stop reading the listener
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()


class TlsSwitch:
    """The public port of a ``permissive`` gRPC endpoint."""

    def __init__(self, host: str, port: int, *, tls_port: int, plain_port: int) -> None:
        self.host = host
        self.port = port
        self.tls_port = tls_port
        self.plain_port = plain_port
        self.clients: set[_Client] = set()
        self.peers: dict[int, tuple[str, int]] = {}  # loopback local port -> the client's address
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Client(self), self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def peer_of(self, loopback_port: int) -> tuple[str, int] | None:
        return self.peers.get(loopback_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for client in list(self.clients):
                if client.connecting is not None:
                    client.connecting.cancel()
                client.transport.close()
            await self._server.wait_closed()
            self._server = None
