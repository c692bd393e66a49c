"""TLS on the remoting ports, as RocketMQ 4.x offers it (TlsSystemConfig).

Server modes: ``disabled``; ``permissive`` (TLS and plaintext on one port, told apart by
the first byte of a connection: 0x16 opens a TLS handshake); ``enforcing`` (plaintext
connections are closed). The server presents a certificate and key from files and may ask
clients for theirs (``need_client_auth``: none, optional, require) checked against a CA file.

Clients either verify the server against a CA file, or, as the official client does in its
default test mode, accept any certificate (``insecure``): encryption without authentication.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from ferrymq.common.config_loader import ConfigError
from ferrymq.common.tasks import within
from ferrymq.remoting.cert_reload import FileWatch, describe

log = logging.getLogger(__name__)

__all__ = ["ClientTls", "ServerTls", "ServerTlsFiles", "TlsMode", "first_byte", "TLS_RECORD_HANDSHAKE"]

TLS_RECORD_HANDSHAKE = 0x16


class TlsMode(str, enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class ServerTlsFiles:
    """Where the server's certificate, key and (with client authentication) clients' CA live."""

    cert_file: str
    key_file: str
    trust_cert_file: str = ""
    need_client_auth: str = "none"
    alpn: tuple[str, ...] = ()  # protocols offered in the handshake ("h2" for gRPC)

    def paths(self) -> tuple[str, ...]:
        """The files a context is made of (the CA only when clients are checked against it)."""
        if self.need_client_auth == "none":
            return self.cert_file, self.key_file
        return self.cert_file, self.key_file, self.trust_cert_file

    def load(self) -> ssl.SSLContext:
        """A server context from the files; OSError or ssl.SSLError when one is unusable
        (missing, unparsable, a key that does not match the certificate)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.need_client_auth != "none":
            context.load_verify_locations(self.trust_cert_file)
        context.verify_mode = _CLIENT_AUTH[self.need_client_auth]
        if self.alpn:
            context.set_alpn_protocols(list(self.alpn))
        return context


@dataclass
class ServerTls:
    mode: TlsMode
    # Read for each accepted TLS connection; cert_reload.py replaces it when the files are
    # renewed (connections already open keep the context they were made with).
    context: ssl.SSLContext
    files: ServerTlsFiles
    # The files as they were when the context was loaded from them, and how often (seconds)
    # to look for a renewal (0: never).
    watch: FileWatch
    reload_interval: float = 0.0

    @staticmethod
    def check(mode: str, cert_file: str = "", key_file: str = "", trust_cert_file: str = "",
              need_client_auth: str = "none") -> TlsMode:
        """The settings' words and combinations, without touching the files (a config can be
        checked where its files do not exist, e.g. by the operator for a pod)."""
        try:
            tls_mode = TlsMode(mode.strip().lower())
        except ValueError:
            raise ConfigError(f"tlsMode must be disabled, permissive or enforcing, got {mode!r}") from None
        if need_client_auth not in _CLIENT_AUTH:
            raise ConfigError(f"tlsServerNeedClientAuth must be none, optional or require, got {need_client_auth!r}")
        if tls_mode is not TlsMode.DISABLED:
            if not cert_file or not key_file:
                raise ConfigError(f"tlsMode={tls_mode.value} needs tlsServerCertPath and tlsServerKeyPath")
            if need_client_auth != "none" and not trust_cert_file:
                raise ConfigError("client authentication needs tlsServerTrustCertPath (the clients' CA)")
        return tls_mode

    @classmethod
    def build(cls, mode: str, cert_file: str = "", key_file: str = "", trust_cert_file: str = "",
              need_client_auth: str = "none", reload_interval: float = 0.0,
              alpn: tuple[str, ...] = ()) -> "ServerTls | None":
        """None when disabled; ConfigError naming what is wrong (a missing file, a bad mode)."""
        tls_mode = cls.check(mode, cert_file, key_file, trust_cert_file, need_client_auth)
        if tls_mode is TlsMode.DISABLED:
            return None
        files = ServerTlsFiles(cert_file, key_file, trust_cert_file, need_client_auth, alpn)
        watch = FileWatch(files.paths())  # before the load: a renewal from now on is seen
        try:
            context = files.load()
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"TLS certificate or key unusable: {exc}") from None
        return cls(tls_mode, context, files, watch, reload_interval)

    async def keep_reloading(self, name: str) -> None:
        """Every ``reload_interval`` seconds, give renewed files to new connections (see
        cert_reload.py). Runs until cancelled: ``name``'s server stops it when it stops."""
        while True:
            await asyncio.sleep(self.reload_interval)
            if self.watch.changed():
                await self._reload(name)

    async def _reload(self, name: str) -> None:
        try:
            # A scratch context, made off the event loop: the live one is replaced only by a
            # context that loaded, so a broken renewal never reaches a handshake.
            context, summary = await asyncio.to_thread(self._load)
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("%s server: renewed TLS files not loaded, still serving the previous certificate: %s",
                        name, exc)
            return
        self.context = context
        log.info("%s server: TLS certificate reloaded for new connections: %s", name, summary)

    def _load(self) -> tuple[ssl.SSLContext, str]:
        return self.files.load(), describe(Path(self.files.cert_file).read_bytes())


@dataclass(frozen=True)
class ClientTls:
    """How a client (or a broker towards its name servers) speaks TLS."""

    ca_file: str | None = None
    insecure: bool = False  # accept any server certificate (RocketMQ's tls.test.mode.enable)
    cert_file: str | None = None  # for servers that require client certificates
    key_file: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


async def first_byte(sock: socket.socket, timeout: float) -> int | None:
    """The connection's first byte without consuming it (MSG_PEEK); None if the peer
    closed or stayed silent for ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await within(ready, timeout)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(fd)
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return None
    return data[0] if data else None
