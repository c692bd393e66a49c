"""Errors the client raises: the client side's (two kinds of which mean nothing reached a
broker, so a send may wait for the route to change), and a broker's refusal."""

from __future__ import annotations


class MQClientError(Exception):
    """Something on this side or the way there failed (no route, unreachable, timeout)."""


class NoRouteError(MQClientError):
    """No writable queue or no master address is known for the topic: nothing was sent."""


class BrokerUnreachableError(MQClientError):
    """The broker could not be connected to (or was lost): killed, restarting, being replaced."""


class MQBrokerError(MQClientError):
    """A broker or name server answered with an error code."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or 'no remark'}")
        self.code = code
        self.remark = remark
