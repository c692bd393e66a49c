"""The HTTP side of a FerryMQ process: ``/healthz``, ``/readyz`` and ``/metrics``.

Kubernetes probes and Prometheus scrape these; they run on their own port (aiohttp), apart
from the remoting port. ``/healthz`` answers while the event loop turns; ``/readyz`` asks
the component (a broker is ready once its store is recovered and a name server took its
registration); ``/metrics`` renders the component's own registry, collected at scrape time
so the hot path pays nothing.
"""

from __future__ import annotations

import logging
from typing import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

# (ready, reason) — reason says what is missing when not ready.
ReadinessCheck = Callable[[], tuple[bool, str]]


class HttpEndpoints:
    def __init__(self, host: str, port: int, *, registries: list[CollectorRegistry],
                 readiness: list[ReadinessCheck], routes: dict[str, Callable] | None = None) -> None:
        self.host = host
        self.routes = routes or {}  # more GET paths (the name-server address service)
        self.port = port
        self.registries = registries
        self.readiness = readiness
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        for path, handler in self.routes.items():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]  # the port the OS picked
        log.info("HTTP endpoints on http://%s:%d (/healthz /readyz /metrics)", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        missing = [reason for ready, reason in (check() for check in self.readiness) if not ready]
        if missing:
            return web.Response(status=503, text="not ready: " + "; ".join(missing) + "\n")
        return web.Response(text="ready\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        body = b"".join(generate_latest(r) for r in self.registries)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
