"""Who may use the console and for what: sign-in with the console's accounts
(:mod:`ferrymq.console.accounts`) or through an OpenID Connect provider
(:mod:`ferrymq.console.oidc`), a session cookie, the role each write action needs, a CSRF
token on every write, whether message bodies are shown, and an audit line for each write.

Without an accounts file the console is open, as before (bind it to a loopback address, or keep
it read-only); write actions are audited all the same.

With one, a request without a live session gets nothing but the sign-in page: ``/api/...``
answers 401, any other path redirects to ``/signin``. Roles (docs/operations.md#sign-in-and-roles):

* viewer: reads everything but bodies unless the account has ``viewBodies``;
* operator: also sends test messages, resends dead letters, turns a group's consumption off
  and on, resets offsets;
* admin: also creates, updates and deletes topics.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from ferrymq.console.accounts import Account, AccountsFile, hash_password, verify_password
from ferrymq.console.audit import AuditLog
from ferrymq.console.http_errors import error_response
from ferrymq.console.oidc import CALLBACK, START, OidcSignIn
from ferrymq.console.sessions import Session, Sessions

__all__ = ["Access", "COOKIE", "CSRF_HEADER", "Identity", "identity"]

COOKIE = "ferrymq_session"
CSRF_HEADER = "X-CSRF-Token"
_IDENTITY = web.RequestKey("ferrymq_identity", object)
_READS = ("GET", "HEAD", "OPTIONS")
# What a request without a session may fetch: the sign-in page and what it shows.
_PUBLIC = {("GET", "/signin"), ("HEAD", "/signin"), ("POST", "/auth/signin"), ("GET", "/healthz"),
           ("GET", "/static/signin.css"), ("GET", "/static/logo.svg"), ("GET", START), ("GET", CALLBACK)}
# Write actions only an admin may take (route, as the router declares it); every other write
# needs an operator. A new write route is an operator's unless listed here.
_ADMIN_WRITES = {("POST", "/api/clusters/{cluster}/topics"), ("DELETE", "/api/clusters/{cluster}/topics/{topic}")}
_AUDIT_BODY_LIMIT = 4096
_NOT_AUDITED = {"body", "password"}  # message bodies and secrets stay out of the audit log
# A name with this many failed sign-ins within the window waits out the window; an address too,
# at a higher count (behind a proxy every visitor has the proxy's address).
_MAX_FAILURES = {"user": 5, "addr": 50}
_FAILURE_WINDOW = 300.0
_SIGNIN_PAGE = (Path(__file__).parent / "static" / "signin.html").read_text()
_MESSAGES = {"failed": "Wrong name or password.", "expired": "Your session ended: sign in again.",
             "locked": "Too many failed sign-ins: wait a few minutes and try again.",
             "signedout": "Signed out.", "sso-failed": "Single sign-on failed: try again.",
             "sso-down": "The single sign-on provider cannot be reached.",
             "no-role": "Your account has no role in this console: ask its administrators."}
# After single sign-on: a same-site page that moves on to the console, so the browser sends the
# SameSite=Strict session cookie (it would not on a redirect chain that began at the provider).
_ONWARD = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
           '<meta http-equiv="refresh" content="0;url=/"><title>Signed in</title></head>'
           '<body><a href="/">Continue to the FerryMQ console</a></body></html>')
_DUMMY = Account("-", hash_password("not a password"), "viewer")  # same cost for an unknown name


@dataclass(frozen=True)
class Identity:
    """Who a request comes from: an account, or nobody when the console has no accounts."""

    account: Account | None
    session: Session | None

    @property
    def user(self) -> str | None:
        return self.account.name if self.account else None

    @property
    def view_bodies(self) -> bool:
        return self.account is None or self.account.view_bodies

    def may(self, role: str) -> bool:
        return self.account is None or self.account.may(role)


_OPEN = Identity(None, None)


def identity(request: web.Request) -> Identity:
    """The identity :class:`Access` found for this request."""
    return request.get(_IDENTITY, _OPEN)


class Access:
    def __init__(self, accounts: AccountsFile | None, audit: AuditLog, *, idle_minutes: float = 60,
                 lifetime_hours: float = 12, secure_cookies: bool = False) -> None:
        self.accounts = accounts
        self.audit = audit
        self.secure_cookies = secure_cookies
        self.sessions = Sessions(idle_seconds=idle_minutes * 60, lifetime_seconds=lifetime_hours * 3600)
        self._failures: dict[str, list[float]] = {}
        self.oidc = OidcSignIn(accounts, audit, self._sso_signed_in, secure_cookies=secure_cookies) if accounts else None

    @property
    def enabled(self) -> bool:
        return self.accounts is not None

    def routes(self) -> list[web.RouteDef]:
        if not self.enabled:
            return []
        return [web.get("/signin", self.signin_page), web.post("/auth/signin", self.sign_in),
                web.post("/auth/signout", self.sign_out), *self.oidc.routes()]

    async def close(self) -> None:
        if self.oidc is not None:
            await self.oidc.close()

    # ------------------------------------------------------------------ the middleware

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        who = self._identify(request)
        if who is None:
            if (request.method, request.path) in _PUBLIC:
                return await handler(request)
            if request.path.startswith("/api/"):
                return error_response(401, "sign in first (POST /auth/signin, or open /signin)")
            raise web.HTTPSeeOther("/signin")
        request[_IDENTITY] = who
        if request.method in _READS or not request.path.startswith("/api/"):
            response = await handler(request)
            if self.enabled:
                # Pages and assets only for a live session: a browser asks again each time
                # rather than showing a cached copy after sign-out.
                response.headers.setdefault("Cache-Control", "private, no-cache")
            return response
        return await self._write(request, handler, who)

    def _identify(self, request: web.Request) -> Identity | None:
        if not self.enabled:
            return _OPEN
        session = self.sessions.find(request.cookies.get(COOKIE))
        if session is None:
            return None
        if session.account is not None:  # signed on through the provider
            if self.accounts.oidc is None:  # single sign-on turned off since
                self.sessions.end(session.id)
                return None
            return Identity(session.account, session)
        account = self.accounts.get(session.user)
        if account is None:  # removed from the accounts file since
            self.sessions.end_user(session.user)
            return None
        return Identity(account, session)

    async def _write(self, request: web.Request, handler, who: Identity):
        route = request.match_info.route.resource
        needs = "admin" if (request.method, route.canonical if route else "") in _ADMIN_WRITES else "operator"
        status, response = 500, None
        try:
            if who.session is not None and not _csrf_ok(request, who.session):
                response = error_response(403, f"missing or wrong {CSRF_HEADER} header (reload the page)")
            elif not who.may(needs):
                response = error_response(403, f"{who.user} is a {who.account.role}: this action needs an {needs}")
            else:
                response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            self.audit.record(user=who.user, action=f"{request.method} {request.path}", status=status,
                              remote=request.remote, query=dict(request.query) or None,
                              request=await _audited_body(request))

    # ------------------------------------------------------------------ sign-in, sign-out

    async def signin_page(self, request: web.Request) -> web.Response:
        if self._identify(request) is not None:
            raise web.HTTPSeeOther("/")
        message = _MESSAGES.get(request.query.get("m", ""), "")
        oidc = self.accounts.oidc
        page = (_SIGNIN_PAGE.replace("{message}", html.escape(message))
                .replace("{message_class}", "message" if message else "message hidden")
                .replace("{form_class}", "" if self.accounts.has_local else "hidden")
                .replace("{sso_class}", "sso" if oidc else "sso hidden")
                .replace("{sso_label}", html.escape(oidc.label if oidc else "")))
        return web.Response(text=page, content_type="text/html")

    async def _sso_signed_in(self, request: web.Request, account: Account) -> web.Response:
        session = self.sessions.start(account.name, account)
        self.audit.record(user=account.name, action="sign-in", status=200, remote=request.remote, role=account.role,
                          via="oidc")
        response = web.Response(text=_ONWARD, content_type="text/html")
        self._set_session_cookie(response, session)
        return response

    def _set_session_cookie(self, response: web.StreamResponse, session: Session) -> None:
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", path="/",
                            secure=self.secure_cookies)

    async def sign_in(self, request: web.Request) -> web.Response:
        if not _same_origin(request):
            return error_response(403, "sign-in from another site refused")
        form = await request.post()
        name, password = str(form.get("name", "")).strip(), str(form.get("password", ""))
        remote = request.remote or "-"
        if self._locked(f"user:{name}") or self._locked(f"addr:{remote}"):
            self.audit.record(user=name or None, action="sign-in", status=429, remote=remote, reason="locked")
            raise web.HTTPSeeOther("/signin?m=locked")
        account = self.accounts.get(name) if name else None
        ok = await asyncio.to_thread(verify_password, account or _DUMMY, password)
        if account is None or not ok:
            self._failed(f"user:{name}")
            self._failed(f"addr:{remote}")
            self.audit.record(user=name or None, action="sign-in", status=401, remote=remote)
            raise web.HTTPSeeOther("/signin?m=failed")
        self._failures.pop(f"user:{name}", None)
        session = self.sessions.start(account.name)
        self.audit.record(user=account.name, action="sign-in", status=200, remote=remote, role=account.role)
        response = web.HTTPSeeOther("/")
        self._set_session_cookie(response, session)
        raise response

    async def sign_out(self, request: web.Request) -> web.Response:
        who = identity(request)
        if who.session is None or not _csrf_ok(request, who.session):
            return error_response(403, f"missing or wrong {CSRF_HEADER} header")
        self.sessions.end(who.session.id)
        self.audit.record(user=who.user, action="sign-out", status=200, remote=request.remote)
        response = web.HTTPSeeOther("/signin?m=signedout")
        response.del_cookie(COOKIE, path="/")
        raise response

    def _failed(self, key: str) -> None:
        if len(self._failures) > 10_000:  # a flood of names: forget the oldest
            for stale in list(self._failures)[:1000]:
                del self._failures[stale]
        self._failures.setdefault(key, []).append(time.monotonic())

    def _locked(self, key: str) -> bool:
        recent = [t for t in self._failures.get(key, ()) if time.monotonic() - t < _FAILURE_WINDOW]
        if recent:
            self._failures[key] = recent
        else:
            self._failures.pop(key, None)
        return len(recent) >= _MAX_FAILURES[key.split(":", 1)[0]]


def _csrf_ok(request: web.Request, session: Session) -> bool:
    return hmac.compare_digest(request.headers.get(CSRF_HEADER, "").encode(), session.csrf_token.encode())


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return origin is None  # a form posted from a sandboxed or file page is refused
    return urlsplit(origin).netloc == request.host


async def _audited_body(request: web.Request) -> dict | None:
    if request.content_type != "application/json" or (request.content_length or 0) > _AUDIT_BODY_LIMIT:
        return None
    try:
        data = json.loads(await request.read() or b"null")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: ("…" if k in _NOT_AUDITED else v) for k, v in data.items()}
