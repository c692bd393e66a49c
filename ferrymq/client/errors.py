"""Errors the client raises: one for the client side, one for a broker's refusal."""

from __future__ import annotations


class MQClientError(Exception):
    """Something on this side or the way there failed (no route, unreachable, timeout)."""


class MQBrokerError(MQClientError):
    """A broker or name server answered with an error code."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or 'no remark'}")
        self.code = code
        self.remark = remark
