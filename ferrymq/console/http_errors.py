"""How the API answers what it cannot do: always JSON ``{"error": "..."}`` with a status
that says whose fault it is (400 bad input, 403 read-only, 404 unknown cluster, 502/504 the
cluster), and how it reads its inputs (query parameters, JSON bodies, points in time)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging

from aiohttp import web

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.common.config_loader import ConfigError
from ferrymq.console.connections import UnknownCluster
from ferrymq.remoting.errors import RemotingError

log = logging.getLogger(__name__)


class BadRequest(Exception):
    """The request itself is wrong: 400 with this text."""


class ReadOnly(Exception):
    """A write action on a read-only console: 403."""


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except web.HTTPException as e:
        if not request.path.startswith("/api/") or e.status < 400:
            raise
        return error_response(e.status, e.reason or "error")
    except BadRequest as e:
        return error_response(400, str(e))
    except ReadOnly as e:
        return error_response(403, str(e))
    except UnknownCluster as e:
        return error_response(404, str(e))
    except MQBrokerError as e:
        return error_response(502, f"the cluster refused: {e.remark or e}")
    except MQClientError as e:
        if unreachable(e):
            return error_response(502, f"the cluster cannot be reached: {e}")
        return error_response(400, str(e))
    except ConfigError as e:
        return error_response(400, str(e))
    except (asyncio.TimeoutError, TimeoutError) as e:
        return error_response(504, f"the cluster did not answer in time ({e or 'timeout'})")
    except OSError as e:
        return error_response(502, f"the cluster cannot be reached: {e}")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("console request %s %s failed", request.method, request.path)
        return error_response(500, "internal error in the console (see its log)")


def unreachable(e: MQClientError) -> bool:
    """The client could not reach a name server or broker (rather than being refused, or
    asked something impossible): the cluster's trouble, not the request's."""
    cause = e.__cause__ or e.__context__
    return isinstance(cause, (OSError, RemotingError, asyncio.TimeoutError)) or "reachable" in str(e)


def read_only_guard(read_only: bool):
    """Refuses every API call that changes something when the console is read-only."""
    @web.middleware
    async def guard(request: web.Request, handler):
        if read_only and request.path.startswith("/api/") and request.method not in ("GET", "HEAD", "OPTIONS"):
            return error_response(403, "this console is read-only: write actions are off (start it with "
                                        "--no-read-only, or set console.readOnly=false in the chart)")
        return await handler(request)
    return guard


# ---------------------------------------------------------------------- inputs

async def json_body(request: web.Request) -> dict:
    try:
        body = await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("the request body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def required_text(data, name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} is required")
    return value.strip()


def int_value(data, name: str, default: int | None = None, *, low: int | None = None, high: int | None = None) -> int:
    raw = data.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    if isinstance(raw, bool):
        raise BadRequest(f"{name} must be an integer, not {raw!r}")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be an integer, not {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}, not {value}")
    return value


def point_in_time(text, name: str) -> int:
    """Epoch milliseconds, or an ISO date-time (UTC unless it names an offset)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str) or not text.strip():
        raise BadRequest(f"{name} is required (epoch milliseconds or an ISO date-time)")
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name} must be epoch milliseconds or an ISO date-time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return int(when.timestamp() * 1000)
