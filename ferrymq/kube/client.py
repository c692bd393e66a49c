"""The few Kubernetes API calls FerryMQ makes, on aiohttp: get, create and replace of a
namespaced object, where replace is a compare-and-swap (the body carries the
``metadata.resourceVersion`` it was read at; the API server refuses it with 409 Conflict when the
object changed since). That is all leader election on a Lease and a state kept in a ConfigMap
need, and it keeps the broker free of the ``kubernetes`` package.

Every request has a timeout (``timeout`` of the client, or of the call): a caller deciding
leadership must never wait on a request for longer than it may act. Failures are one of:
``KubeApiError`` (the server answered with an error status; ``NotFound`` for 404, ``Conflict`` for
409, with the API's reason and message), or ``KubeConnectionError`` (no answer: refused, reset,
TLS, timeout). Both derive from ``KubeError``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

from ferrymq.kube.config import KubeConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resource:
    """A namespaced kind: its apiVersion ("v1" or "group/version") and plural name."""

    api_version: str
    plural: str

    def path(self, namespace: str, name: str = "") -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        tail = f"/{quote(name, safe='')}" if name else ""
        return f"{root}/namespaces/{quote(namespace, safe='')}/{self.plural}{tail}"


LEASES = Resource("coordination.k8s.io/v1", "leases")
CONFIG_MAPS = Resource("v1", "configmaps")


class KubeError(Exception):
    """Any failure of a Kubernetes API call."""


class KubeConnectionError(KubeError):
    """No answer from the API server (connection refused or reset, TLS failure, timeout). A
    write that failed this way may or may not have happened."""


class KubeApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())


class NotFound(KubeApiError):
    """404: the object does not exist."""


class Conflict(KubeApiError):
    """409: a compare-and-swap lost (the object changed since it was read: reason "Conflict"),
    or a create found the object already there (reason "AlreadyExists")."""


class KubeClient:
    """One API server's client. Open lazily on the first call; ``close()`` (or ``async with``)
    when done. ``timeout`` (seconds) bounds each request unless the call gives its own."""

    def __init__(self, config: KubeConfig, *, timeout: float = 10.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.config = config
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._opening = asyncio.Lock()

    async def __aenter__(self) -> "KubeClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # ------------------------------------------------------------------ operations

    async def get(self, resource: Resource, namespace: str, name: str, *, timeout: float | None = None) -> dict:
        return await self._request("GET", resource.path(namespace, name), None, timeout)

    async def create(self, resource: Resource, namespace: str, body: dict, *, timeout: float | None = None) -> dict:
        """Create ``body`` (its metadata.name set); ``Conflict`` (AlreadyExists) if it exists."""
        return await self._request("POST", resource.path(namespace), body, timeout)

    async def replace(self, resource: Resource, namespace: str, name: str, body: dict, *,
                      timeout: float | None = None) -> dict:
        """Replace the object with ``body`` if it is still at ``body.metadata.resourceVersion``
        (required: an update without it would be unconditional); ``Conflict`` if it changed."""
        if not (body.get("metadata") or {}).get("resourceVersion"):
            raise ValueError("replace is a compare-and-swap: body.metadata.resourceVersion is required")
        return await self._request("PUT", resource.path(namespace, name), body, timeout)

    # ------------------------------------------------------------------ transport

    async def _open(self) -> aiohttp.ClientSession:
        async with self._opening:
            if self._session is None:
                ssl_context = await asyncio.to_thread(self.config.ssl_context)
                connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False)
                self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False)
            return self._session

    async def _request(self, method: str, path: str, body: dict | None, timeout: float | None) -> dict:
        session = self._session or await self._open()
        limit = self.timeout if timeout is None else timeout
        data = json.dumps(body).encode() if body is not None else None
        force_reread = False
        for attempt in range(2):
            token = (await asyncio.to_thread(self.config.bearer_token, force_reread=force_reread)
                     if self.config.token_file else self.config.token)
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            if token:
                headers["Authorization"] = f"Bearer {token}"
            try:
                async with asyncio.timeout(limit):
                    async with session.request(method, self.config.server + path, data=data, headers=headers) as resp:
                        raw = await resp.read()
                        status = resp.status
            except TimeoutError:
                raise KubeConnectionError(f"{method} {path}: no answer within {limit:g} s") from None
            except aiohttp.ClientError as exc:
                raise KubeConnectionError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
            if status == 401 and attempt == 0 and self.config.token_file:
                force_reread = True  # the kubelet rotated the projected token: read it again, once
                continue
            break
        if 200 <= status < 300:
            try:
                return json.loads(raw)
            except ValueError:
                raise KubeApiError(status, "BadResponse", f"not JSON: {raw[:200]!r}", method, path) from None
        raise _api_error(status, raw, method, path)


def _api_error(status: int, raw: bytes, method: str, path: str) -> KubeApiError:
    """The error for a failed call, with the reason and message of the API's Status object when
    it sent one (it does for every error it produces itself)."""
    reason, message = "", raw[:300].decode(errors="replace").strip()
    try:
        doc = json.loads(raw)
        if isinstance(doc, dict) and doc.get("kind") == "Status":
            reason, message = doc.get("reason", ""), doc.get("message", message)
    except ValueError:
        pass
    kind = NotFound if status == 404 else Conflict if status == 409 else KubeApiError
    return kind(status, reason or {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict"}.get(
        status, "Error"), message, method, path)
