"""A listener that looks at each accepted connection's first byte before choosing TLS or
plaintext for it (RocketMQ's HandshakeHandler), then serves it with an asyncio protocol: the
remoting ports and the gRPC port (TLS and plaintext on one port, ``permissive``; TLS only,
``enforcing``). Each TLS connection gets the context its ``ServerTls`` holds when it is accepted,
so a reloaded certificate reaches new connections."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Callable

from ferrymq.remoting.tls import TLS_RECORD_HANDSHAKE, ServerTls, TlsMode, first_byte

log = logging.getLogger(__name__)


class TlsListener:
    """Accepts connections itself so it can look at each one's first byte before choosing
    TLS or plaintext (RocketMQ's HandshakeHandler), then serves it with a protocol from ``new_connection``."""

    FIRST_BYTE_TIMEOUT = 120.0  # a silent connection is dropped, as the idle timeout would
    HANDSHAKE_TIMEOUT = 10.0

    def __init__(self, tls: ServerTls, new_connection: Callable[[], asyncio.Protocol], name: str) -> None:
        self._tls = tls
        self._new_connection = new_connection
        self._name = name
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._opening: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._accepting = loop.create_task(self._accept_loop(sock), name=f"{self._name} accept")
        return sock.getsockname()[1]

    async def stop(self) -> None:
        tasks = [t for t in (self._accepting, *self._opening) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:  # EMFILE and friends: keep serving the connections we have
                log.warning("%s server: accept failed: %s", self._name, exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._open(conn))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio turns Nagle off only for sockets it made as IPPROTO_TCP; a request answered in
            # several writes (a gRPC stream's frames) would otherwise wait for the peer's delayed ACK
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            peer = conn.getpeername()[0]
        except OSError:
            conn.close()
            return
        try:
            first = await first_byte(conn, self.FIRST_BYTE_TIMEOUT)
            use_tls = first == TLS_RECORD_HANDSHAKE
            if first is None or (not use_tls and self._tls.mode is TlsMode.ENFORCING):
                if first is not None:
                    log.warning("%s server: plaintext connection from %s closed: TLS is enforced", self._name, peer)
                conn.close()
                return
            loop = asyncio.get_running_loop()
            await loop.connect_accepted_socket(
                self._new_connection, conn, ssl=self._tls.context if use_tls else None,
                ssl_handshake_timeout=self.HANDSHAKE_TIMEOUT if use_tls else None)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.warning("%s server: TLS handshake with %s failed: %s", self._name, peer, exc)
            conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise
