"""The console over HTTPS (``--https-cert``/``--https-key``), its certificate renewed on disk
served to new connections without a restart: the remoting servers' own reloading
(:class:`ferrymq.remoting.tls.ServerTls`, ferrymq/remoting/cert_reload.py: a kubelet-swapped
Secret volume is seen by what the paths lead to now; a renewal that does not load is logged and
the previous certificate stays).

aiohttp takes one SSLContext when it starts listening, where the remoting servers pick a context
per accepted connection. So the listener's context hands each new handshake, through its SNI
callback, the newest context ServerTls loaded; connections already open keep theirs.
"""

from __future__ import annotations

import ssl

from ferrymq.remoting.tls import ServerTls

__all__ = ["ConsoleHttps"]


class ConsoleHttps:
    def __init__(self, cert_file: str, key_file: str, reload_seconds: float = 30.0) -> None:
        """ConfigError (naming the file) when the pair cannot be used now."""
        self.tls = ServerTls.build("enforcing", cert_file, key_file, reload_interval=reload_seconds)
        self.context = self.tls.context  # the listener's: ServerTls replaces tls.context on renewal
        self.context.sni_callback = self._pick

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        ssl_object.context = self.tls.context
        return None

    async def keep_reloading(self) -> None:
        """Runs until cancelled (the console's stop)."""
        await self.tls.keep_reloading("console")
