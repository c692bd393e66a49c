"""The name-server address service RocketMQ clients and brokers poll when no ``namesrvAddr``
is set (``http://<rocketmq.namesrv.domain>:8080/rocketmq/<subgroup>``, "TopAddressing").

``ferrymq nsaddr`` serves it on a port of its own; ``ferrymq namesrv --address-service-dns``
serves it on the name server's HTTP port (what the operator does). It answers
``GET /rocketmq/<subgroup>`` (any subgroup, with or without a ``-<unit>`` suffix)
with the name servers that answer now, as ``host:port;host:port``. Candidates come from a
static list, from DNS names resolved on every round (a headless Service lists every ready
name-server pod, so a scaled StatefulSet shows up by itself) and from a file re-read on every
round. Each round (``probe_interval``) connects to every candidate; only those that accept
a connection are served. With none alive the answer is 503 and clients keep their last list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

from aiohttp import web

from ferrymq.common.tasks import TaskSet, within

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 1.0
ADDRESS_ROUTE = "/rocketmq/{subgroup}"


def _split(addresses: str) -> list[str]:
    return [a.strip() for a in addresses.replace(",", ";").split(";") if a.strip()]


class NamesrvAddressBook:
    """The live name servers, probed every ``probe_interval``; ``handle`` answers the GET."""

    def __init__(self, *, static: str = "", dns: str = "", file: str | None = None,
                 probe_interval: float = 5.0) -> None:
        self.static = _split(static)
        self.dns = _split(dns)  # name:port, resolved to every address the name has
        self.file = Path(file) if file else None
        self.probe_interval = probe_interval
        self.live: list[str] = []
        self._tasks = TaskSet("nsaddr", log)

    @property
    def configured(self) -> bool:
        return bool(self.static or self.dns or self.file)

    async def start(self) -> None:
        await self.probe_once()
        self._tasks.every(self.probe_interval, self.probe_once, "nsaddr-probe")

    async def stop(self) -> None:
        await self._tasks.close()

    async def candidates(self) -> list[str]:
        found = list(self.static)
        if self.file is not None:
            try:
                found += _split((await asyncio.to_thread(self.file.read_text)).replace("\n", ";"))
            except OSError as e:
                log.warning("name-server list %s unreadable: %s", self.file, e)
        loop = asyncio.get_running_loop()
        for entry in self.dns:
            name, _, port = entry.rpartition(":")
            try:
                infos = await loop.getaddrinfo(name, int(port), family=socket.AF_INET, type=socket.SOCK_STREAM)
            except (OSError, ValueError) as e:
                log.debug("%s does not resolve: %s", entry, e)
                continue
            found += sorted({f"{info[4][0]}:{port}" for info in infos})
        return list(dict.fromkeys(found))

    async def probe_once(self) -> None:
        candidates = await self.candidates()
        alive = await asyncio.gather(*(_accepts(c) for c in candidates))
        live = [c for c, ok in zip(candidates, alive) if ok]
        if live != self.live:
            log.info("live name servers: %s", ";".join(live) or "none")
        self.live = live

    async def handle(self, request: web.Request) -> web.Response:
        """GET /rocketmq/{subgroup}: the live list, or 503 when none is alive."""
        if not self.live:
            return web.Response(status=503, text="no live name server\n")
        return web.Response(text=";".join(self.live) + "\n")


class NamesrvAddressServer:
    """``ferrymq nsaddr``: an address book on its own HTTP port."""

    def __init__(self, host: str, port: int, book: NamesrvAddressBook) -> None:
        self.host, self.port, self.book = host, port, book
        self._runner: web.AppRunner | None = None

    @property
    def live(self) -> list[str]:
        return self.book.live

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/rocketmq/nsaddr"

    async def start(self) -> None:
        await self.book.start()
        app = web.Application()
        app.router.add_get(ADDRESS_ROUTE, self.book.handle)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        log.info("name-server address service on %s", self.url)

    async def stop(self) -> None:
        await self.book.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")


async def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        _, writer = await within(asyncio.open_connection(host, int(port)), PROBE_TIMEOUT)
    except (OSError, ValueError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
