"""RocketMQ 4.x remoting protocol: codes, frame codec, connections, server and client."""

from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from ferrymq.remoting.connection import Connection, RequestHandler
from ferrymq.remoting.errors import (
    FrameError,
    FrameTooLargeError,
    HeaderDecodeError,
    HeaderFieldError,
    RemotingConnectionError,
    RemotingError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)
from ferrymq.remoting.server import RemotingServer

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME",
    "Connection",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "HeaderDecodeError",
    "HeaderFieldError",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectionError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RemotingTooMuchRequestError",
    "RequestCode",
    "RequestHandler",
    "ResponseCode",
    "SerializeType",
    "encode_frame",
]
