"""The console over HTTPS (``--https-cert``/``--https-key``), its certificate renewed on disk
served to new connections without a restart, as the remoting and gRPC ports do
(ferrymq/remoting/cert_reload.py: a kubelet-swapped Secret volume is seen by what the paths lead
to now; a renewal that does not load is logged and the previous certificate stays).

aiohttp takes one SSLContext when it starts listening. That context's SNI callback hands each
new handshake the newest loaded context, so a renewal needs no new listener; connections already
open keep the certificate they were made with.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from ferrymq.remoting.cert_reload import FileWatch, describe
from ferrymq.remoting.tls import ServerTlsFiles

__all__ = ["ConsoleHttps"]

log = logging.getLogger(__name__)


class ConsoleHttps:
    def __init__(self, cert_file: str, key_file: str, reload_seconds: float = 30.0) -> None:
        """OSError or ssl.SSLError when the files cannot be used now."""
        self.files = ServerTlsFiles(cert_file, key_file)
        self.reload_seconds = reload_seconds
        self._watch = FileWatch(self.files.paths())  # before the load: a renewal from now on is seen
        self._current = self.files.load()
        self.context = self.files.load()  # the listener's; it hands handshakes to _current
        self.context.sni_callback = self._pick

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        ssl_object.context = self._current
        return None

    async def keep_reloading(self) -> None:
        """Runs until cancelled: every ``reload_seconds``, a changed pair is loaded off the loop
        and served to new connections."""
        while True:
            await asyncio.sleep(self.reload_seconds)
            if not self._watch.changed():
                continue
            try:
                context, summary = await asyncio.to_thread(self._load)
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.warning("console: renewed TLS files not loaded, still serving the previous certificate: %s", exc)
                continue
            self._current = context
            log.info("console: TLS certificate reloaded for new connections: %s", summary)

    def _load(self) -> tuple[ssl.SSLContext, str]:
        return self.files.load(), describe(Path(self.files.cert_file).read_bytes())
