"""Exceptions raised by the remoting layer.

Transport-level failures (timeouts, lost connections, exhausted in-flight permits) derive
from RemotingError so callers can treat "the peer did not answer" in one place. Frame
errors derive from it as well: they mean the byte stream from (or to) a peer is unusable.
HeaderFieldError is different in kind: it is raised by processors reading a request, and
the connection turns it into a SYSTEM_ERROR answer instead of failing anything.
"""

from __future__ import annotations


class RemotingError(Exception):
    """Base class of every transport-level failure."""


class RemotingTimeoutError(RemotingError):
    """No response (or no write progress) within the allowed time."""


class RemotingConnectionError(RemotingError):
    """The connection could not be established or was lost."""


class RemotingTooMuchRequestError(RemotingError):
    """All in-flight permits stayed taken for the whole timeout."""


class FrameError(RemotingError):
    """A frame could not be decoded or encoded; the stream is unusable afterwards."""


class FrameTooLargeError(FrameError):
    """A frame is longer than the configured maximum."""


class HeaderDecodeError(FrameError):
    """The header bytes of a frame are malformed."""


class HeaderFieldError(Exception):
    """A custom header field is missing, empty or unparsable.

    `field` names the field; the message reads like Java's so that remarks sent back
    to Java clients look familiar.
    """

    def __init__(self, field: str, message: str | None = None) -> None:
        super().__init__(message or f"the custom field <{field}> is null")
        self.field = field
