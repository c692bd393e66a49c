"""A broker's link to the controller when it runs in several replicas (``controllerAddr`` lists
them separated by ``;``, as ``namesrvAddr`` lists name servers).

Only the replica that holds the Lease answers; the others answer CONTROLLER_NOT_LEADER and name
the leader (``leaderAddr``) when they know it. ``ControllerLink.invoke`` sends a request to the
replica that answered last; on CONTROLLER_NOT_LEADER it goes to the named leader, else to the
next replica; on a connection error or timeout to the next replica. Each address is tried at
most once per call, so a call ends after at most one round; when nobody answered it raises: the
last transport error if every replica failed that way, else ``ControllerNotLeaderError``.

With a single address this is a plain invoke (one replica, which always leads).
"""

from __future__ import annotations

import asyncio
import logging

from ferrymq.common.controller_protocol import CONTROLLER_NOT_LEADER
from ferrymq.remoting.client import RemotingClient, parse_address
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import NotLeaderResponseHeader

log = logging.getLogger(__name__)


class ControllerNotLeaderError(RemotingError):
    """Every controller replica that answered said it does not lead (an election under way)."""


def controller_addresses(value: str) -> list[str]:
    """The addresses of ``controllerAddr``: "host:port;host2:port", blanks ignored, each checked
    (ValueError naming the bad one), duplicates dropped."""
    addresses: list[str] = []
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            parse_address(part)
        except ValueError:
            raise ValueError(f"controllerAddr: {part!r} is not host:port") from None
        if part not in addresses:
            addresses.append(part)
    if not addresses:
        raise ValueError("controllerAddr lists no controller (host:port, several separated by ';')")
    return addresses


class ControllerLink:
    """Requests to whichever controller replica leads. ``addresses``: "a:1;b:2" or a list."""

    def __init__(self, addresses: str | list[str], client: RemotingClient) -> None:
        self.addresses = controller_addresses(addresses if isinstance(addresses, str) else ";".join(addresses))
        self.client = client
        self.current = self.addresses[0]  # the replica that answered last (possibly a named leader)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """The leader's answer to ``request`` (any code but CONTROLLER_NOT_LEADER). ``timeout``
        bounds each attempt. Raises the last transport error (RemotingError, OSError,
        TimeoutError) or ControllerNotLeaderError when no replica answered as leader."""
        tried: set[str] = set()
        target: str | None = self.current
        last_error: BaseException | None = None
        refusals: list[str] = []
        while target is not None:
            tried.add(target)
            try:
                answer = await self.client.invoke(target, request, timeout)
            except (RemotingError, OSError, asyncio.TimeoutError) as exc:
                last_error = exc
                log.debug("controller %s: %s", target, exc)
                target = self._next(target, tried)
                continue
            if answer.code != CONTROLLER_NOT_LEADER:
                if target != self.current:
                    log.info("controller leader is %s (was asking %s)", target, self.current)
                    self.current = target
                return answer
            leader = NotLeaderResponseHeader.read(answer).leader_addr
            refusals.append(f"{target} does not lead" + (f" (names {leader})" if leader else ""))
            target = leader if leader and leader not in tried and _valid(leader) else self._next(target, tried)
        if refusals:
            raise ControllerNotLeaderError("no controller replica leads now: " + "; ".join(refusals)
                                           + (f"; last error: {last_error}" if last_error else ""))
        assert last_error is not None
        raise last_error

    def _next(self, after: str, tried: set[str]) -> str | None:
        """The first untried address after ``after`` in the configured order (wrapping round)."""
        start = self.addresses.index(after) + 1 if after in self.addresses else 0
        for addr in self.addresses[start:] + self.addresses[:start]:
            if addr not in tried:
                return addr
        return None


def _valid(address: str) -> bool:
    try:
        parse_address(address)
        return True
    except ValueError:
        return False
