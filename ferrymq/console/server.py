"""The console's aiohttp application: the JSON API under ``/api/`` and the pages (static
ES modules and CSS, served from this package, no CDN)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from aiohttp import web

from ferrymq import __version__
from ferrymq.console.access import Access, identity
from ferrymq.console.accounts import AccountsFile
from ferrymq.console.audit import AuditLog
from ferrymq.console.connections import Connections
from ferrymq.console.groups_api import GroupsApi
from ferrymq.console.https import ConsoleHttps
from ferrymq.console.http_errors import json_errors, read_only_guard
from ferrymq.console.messages_api import MessagesApi
from ferrymq.console.overview import OverviewSampler
from ferrymq.console.settings import ConsoleSettings
from ferrymq.console.topics_api import TopicsApi

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


class ConsoleServer:
    def __init__(self, settings: ConsoleSettings) -> None:
        """Raises :class:`ferrymq.console.accounts.AccountsError` for an accounts file it
        cannot use, ConfigError for HTTPS files it cannot."""
        self.settings = settings
        self.https = (ConsoleHttps(settings.https_cert, settings.https_key, settings.https_reload_seconds)
                      if settings.https_cert else None)
        accounts = AccountsFile(settings.accounts_file) if settings.accounts_file else None
        self.audit = AuditLog(settings.audit_log)
        self.access = Access(accounts, self.audit, idle_minutes=settings.session_idle_minutes,
                             lifetime_hours=settings.session_hours,
                             secure_cookies=settings.secure_cookies or self.https is not None)
        self.connections = Connections(settings)
        self.sampler = OverviewSampler(self.connections, settings.sample_seconds, settings.history_minutes)
        self.port = settings.port
        self._runner: web.AppRunner | None = None
        self._reloading: asyncio.Task | None = None

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[json_errors, self.access.middleware,
                                           read_only_guard(self.settings.read_only)])
        app.router.add_routes(self.access.routes())
        app.router.add_get("/api/config", self.config)
        app.router.add_get("/api/clusters/{cluster}/overview", self.overview)
        for api in (TopicsApi(self.connections), GroupsApi(self.connections),
                    MessagesApi(self.connections, self.settings.max_export)):
            app.router.add_routes(api.routes())
        app.router.add_route("*", "/api/{tail:.*}", self.no_such_api)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/", self.index)
        app.router.add_static("/static/", STATIC, append_version=False)
        app.on_response_prepare.append(self._headers)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.build_app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.settings.host, self.settings.port,
                          ssl_context=self.https.context if self.https else None).start()
        if self.https is not None:
            self._reloading = asyncio.create_task(self.https.keep_reloading(), name="console TLS reload")
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        self.sampler.start()
        log.info("console on %s (read-only: %s; sign-in: %s; clusters: %s)", self.url,
                 self.settings.read_only, "on" if self.access.enabled else "off",
                 ", ".join(c.name for c in self.settings.clusters))

    async def stop(self) -> None:
        if self._reloading is not None:
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
            self._reloading = None
        await self.sampler.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.connections.close()
        await self.access.close()
        self.audit.close()

    @property
    def url(self) -> str:
        host = self.settings.host if self.settings.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"{'https' if self.https else 'http'}://{host}:{self.port}"

    # ------------------------------------------------------------------ handlers

    async def config(self, request: web.Request) -> web.Response:
        who = identity(request)
        user = None if who.account is None else {"name": who.account.name, "role": who.account.role,
                                                 "viewBodies": who.account.view_bodies}
        return web.json_response({"version": __version__, "readOnly": self.settings.read_only,
                                  "signIn": self.access.enabled, "user": user, "traceUrl": self.settings.trace_url,
                                  "csrfToken": who.session.csrf_token if who.session else None,
                                  "sampleSeconds": self.settings.sample_seconds,
                                  "maxExport": self.settings.max_export,
                                  "clusters": [{"name": c.name, "namesrv": c.namesrv_addr} for c in self.settings.clusters]})

    async def overview(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        return web.json_response(await self.sampler.overview(connection))

    async def no_such_api(self, request: web.Request) -> web.Response:
        raise web.HTTPNotFound(reason=f"no API {request.method} {request.path}")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        # Everything the pages load comes from here: no inline scripts, no other origin.
        response.headers.setdefault("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "
                                    "style-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; "
                                    "frame-ancestors 'none'")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if request.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
