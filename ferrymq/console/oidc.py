"""Sign-in through an OpenID Connect provider: the Authorization Code flow with PKCE (RFC 7636),
the ID token's signature and claims checked with joserfc against the provider's published keys,
and the user's role from their groups (:class:`ferrymq.console.oidc_settings.OidcSettings`).

``GET /auth/oidc/start`` sends the browser to the provider with a fresh state, nonce and code
challenge (the state also in a short-lived cookie, so a callback is only taken from the browser
that started it); ``GET /auth/oidc/callback`` trades the code for tokens, checks the ID token
(issuer, audience, expiry, nonce), reads the username and groups (from the ID token, else from
the userinfo endpoint) and hands the account to ``signed_in``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ferrymq.console.accounts import Account, AccountsFile
from ferrymq.console.audit import AuditLog
from ferrymq.console.oidc_settings import OidcSettings

__all__ = ["OidcSignIn", "START", "CALLBACK"]

log = logging.getLogger(__name__)

START, CALLBACK = "/auth/oidc/start", "/auth/oidc/callback"
_STATE_COOKIE = "ferrymq_oidc_state"
_PENDING_SECONDS = 600.0  # from start to callback
_MAX_PENDING = 10_000
_METADATA_SECONDS = 3600.0
_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
_TIMEOUT = aiohttp.ClientTimeout(total=15)


class SignInFailed(Exception):
    """The provider's answer cannot sign anyone in: the reason (for the log, not the visitor)."""


@dataclass
class _Pending:
    nonce: str
    verifier: str
    redirect_uri: str
    started: float


@dataclass
class _Provider:
    """The provider's metadata and keys, as fetched at a time."""

    settings: OidcSettings
    metadata: dict
    keys: KeySet
    fetched: float


class OidcSignIn:
    def __init__(self, accounts: AccountsFile, audit: AuditLog,
                 signed_in: Callable[[web.Request, Account], Awaitable[web.StreamResponse]], *,
                 secure_cookies: bool = False) -> None:
        self.accounts = accounts
        self.audit = audit
        self.signed_in = signed_in
        self.secure_cookies = secure_cookies
        self._pending: dict[str, _Pending] = {}
        self._provider: _Provider | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ca: tuple[str, ssl.SSLContext] | None = None  # caFile's context, read once per file

    def routes(self) -> list[web.RouteDef]:
        return [web.get(START, self.start), web.get(CALLBACK, self.callback)]

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # ------------------------------------------------------------------ the two legs

    async def start(self, request: web.Request) -> web.StreamResponse:
        settings = self._settings()
        try:
            provider = await self._provider_for(settings)
        except SignInFailed as e:
            log.warning("OIDC provider %s: %s", settings.issuer, e)
            raise web.HTTPSeeOther("/signin?m=sso-down") from None
        self._forget_old()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        redirect_uri = settings.redirect_url or f"{request.scheme}://{request.host}{CALLBACK}"
        self._pending[state] = _Pending(nonce, verifier, redirect_uri, time.monotonic())
        query = urlencode({"response_type": "code", "client_id": settings.client_id, "redirect_uri": redirect_uri,
                           "scope": " ".join(settings.scopes), "state": state, "nonce": nonce,
                           "code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256"})
        endpoint = provider.metadata["authorization_endpoint"]
        response = web.HTTPSeeOther(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}")
        # Lax: the provider's redirect back is a cross-site navigation.
        response.set_cookie(_STATE_COOKIE, state, httponly=True, samesite="Lax", path="/auth/oidc",
                            max_age=int(_PENDING_SECONDS), secure=self.secure_cookies)
        raise response

    async def callback(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        state = q.get("state", "")
        pending = self._pending.pop(state, None) if state else None
        try:
            if q.get("error"):
                raise SignInFailed(f"the provider answered {q['error']}: {q.get('error_description', '')}".strip())
            if pending is None or request.cookies.get(_STATE_COOKIE) != state:
                raise SignInFailed("unknown or expired state, or a callback from another browser")
            if time.monotonic() - pending.started > _PENDING_SECONDS:
                raise SignInFailed("the sign-in took longer than 10 minutes")
            if not q.get("code"):
                raise SignInFailed("no authorization code in the callback")
            settings = self._settings()
            account = await self._account(settings, q["code"], pending)
        except SignInFailed as e:
            log.warning("OIDC sign-in refused: %s", e)
            self.audit.record(user=None, action="sign-in", status=401, remote=request.remote, via="oidc",
                              reason=str(e))
            raise web.HTTPSeeOther("/signin?m=sso-failed") from None
        if account.role == "":
            self.audit.record(user=account.name, action="sign-in", status=403, remote=request.remote, via="oidc",
                              reason="no role for this user's groups")
            raise web.HTTPSeeOther("/signin?m=no-role")
        response = await self.signed_in(request, account)
        response.del_cookie(_STATE_COOKIE, path="/auth/oidc")
        return response

    # ------------------------------------------------------------------ tokens and claims

    async def _account(self, settings: OidcSettings, code: str, pending: _Pending) -> Account:
        provider = await self._provider_for(settings)
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": pending.redirect_uri,
                "code_verifier": pending.verifier, "client_id": settings.client_id}
        auth = aiohttp.BasicAuth(settings.client_id, settings.client_secret) if settings.client_secret else None
        tokens = await self._json("POST", provider.metadata["token_endpoint"], settings, data=form, auth=auth)
        if not isinstance(tokens.get("id_token"), str):
            raise SignInFailed("the token endpoint answered without an id_token")
        claims = await self._id_claims(settings, tokens["id_token"], pending.nonce)
        wanted = (settings.username_claim, settings.groups_claim)
        if any(c not in claims for c in wanted) and provider.metadata.get("userinfo_endpoint") \
                and isinstance(tokens.get("access_token"), str):
            info = await self._json("GET", provider.metadata["userinfo_endpoint"], settings,
                                    headers={"Authorization": f"Bearer {tokens['access_token']}"})
            if info.get("sub") != claims["sub"]:
                raise SignInFailed("the userinfo endpoint answered for another subject")
            claims = {**info, **claims}
        name = claims.get(settings.username_claim) or claims["sub"]
        groups = claims.get(settings.groups_claim) or []
        groups = [groups] if isinstance(groups, str) else [g for g in groups if isinstance(g, str)]
        role = settings.role_of(groups) or ""
        return Account(str(name), "", role, bool(settings.body_groups.intersection(groups)), source="oidc")

    async def _id_claims(self, settings: OidcSettings, id_token: str, nonce: str) -> dict:
        for refresh in (False, True):  # a key not known yet: the provider rotated its keys
            provider = await self._provider_for(settings, refresh=refresh)
            allowed = [a for a in provider.metadata.get("id_token_signing_alg_values_supported", ["RS256"])
                       if a in _ALGORITHMS]
            try:
                token = jwt.decode(id_token, provider.keys, algorithms=allowed)
                break
            except JoseError as e:
                if refresh:
                    raise SignInFailed(f"the ID token does not verify: {e}") from None
        registry = jwt.JWTClaimsRegistry(leeway=60, iss={"essential": True, "value": provider.metadata["issuer"]},
                                         aud={"essential": True, "value": settings.client_id},
                                         sub={"essential": True}, exp={"essential": True},
                                         nonce={"essential": True, "value": nonce})
        try:
            registry.validate(token.claims)
        except JoseError as e:
            raise SignInFailed(f"the ID token's claims do not hold: {e}") from None
        return dict(token.claims)

    # ------------------------------------------------------------------ the provider

    def _settings(self) -> OidcSettings:
        settings = self.accounts.oidc
        if settings is None:
            raise web.HTTPNotFound(reason="single sign-on is not configured")
        return settings

    async def _provider_for(self, settings: OidcSettings, *, refresh: bool = False) -> _Provider:
        p = self._provider
        if p is not None and p.settings == settings and not refresh and time.monotonic() - p.fetched < _METADATA_SECONDS:
            return p
        metadata = await self._json("GET", settings.issuer.rstrip("/") + "/.well-known/openid-configuration", settings)
        if metadata.get("issuer") != settings.issuer:
            raise SignInFailed(f"the discovery document names issuer {metadata.get('issuer')!r}, "
                               f"not {settings.issuer!r}")
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not metadata.get(k)]
        if missing:
            raise SignInFailed(f"the discovery document has no {', '.join(missing)}")
        try:
            keys = KeySet.import_key_set(await self._json("GET", metadata["jwks_uri"], settings))
        except (JoseError, ValueError, TypeError, KeyError) as e:
            raise SignInFailed(f"the provider's keys cannot be read: {e}") from None
        self._provider = _Provider(settings, metadata, keys, time.monotonic())
        return self._provider

    async def _json(self, method: str, url: str, settings: OidcSettings, **kwargs) -> dict:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=_TIMEOUT)
        ssl_context = await self._ssl_for(settings.ca_file)
        try:
            async with self._http.request(method, url, ssl=ssl_context, **kwargs) as r:
                body = await r.json(content_type=None)
                if r.status != 200 or not isinstance(body, dict):
                    raise SignInFailed(f"{method} {url} answered {r.status}: {str(body)[:300]}")
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise SignInFailed(f"{method} {url}: {e or type(e).__name__}") from None

    async def _ssl_for(self, ca_file: str | None) -> ssl.SSLContext | None:
        if not ca_file:
            return None
        if self._ca is None or self._ca[0] != ca_file:
            try:
                context = await asyncio.to_thread(ssl.create_default_context, cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise SignInFailed(f"caFile {ca_file}: {e}") from None
            self._ca = (ca_file, context)
        return self._ca[1]

    def _forget_old(self) -> None:
        now = time.monotonic()
        for state in [s for s, p in self._pending.items() if now - p.started > _PENDING_SECONDS]:
            del self._pending[state]
        while len(self._pending) >= _MAX_PENDING:
            del self._pending[next(iter(self._pending))]
