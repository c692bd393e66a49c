"""gRPC over our own HTTP/2 connections (http2.py): calls of one service's methods, as the
gRPC wire protocol (PROTOCOL-HTTP2) frames them.

A request stream whose ``:path`` names a method of the service becomes a ``Call``: its messages
(a flag byte, a 4-byte length, the protobuf; gzip/deflate-compressed ones are inflated) go to
the service's coroutine for that method, which gets ``(request, context)`` (unary and
server-streaming) or ``(request_iterator, context)`` (bidirectional) and returns a response (a
unary method may return it already serialized, as bytes) or yields responses. The answer is
response headers, one DATA frame per response, and trailers with ``grpc-status``; a call that
fails before answering gets trailers only. The context gives what the service reads of a call:
``peer()``, ``invocation_metadata()``, ``time_remaining()``.

``grpc-timeout`` is a deadline: past it the call is cancelled and answered DEADLINE_EXCEEDED. A
stream reset by the client, or its connection closing, cancels the call. Methods listed as
eager start on the read that completed them and become a task only if they wait (the send
path, common/eager.py), so an acknowledged send costs no task and no extra pass of the loop;
with the store's dispatch rounds, the sends one read completes are written together (one write
per file), as a remoting connection's are, and answered in one write.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import struct
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Coroutine

from google.protobuf.message import DecodeError

from ferrymq.common.eager import Resumption, start_eagerly
from ferrymq.common.tasks import within
from ferrymq.grpc.hpack import Encoder
from ferrymq.grpc.http2 import DATA, HEADERS, NO_ERROR, Http2Connection, Stream
from ferrymq.remoting.connection import DispatchRounds

log = logging.getLogger(__name__)

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED = 0, 1, 2, 3, 4
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 12, 13, 14

_PREFIX = struct.Struct(">BI")
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
ACCEPTED_ENCODINGS = "identity,deflate,gzip"
_encoder = Encoder()
RESPONSE_HEADERS = _encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
TRAILERS_OK = _encoder.encode([("grpc-status", "0")])
_TRANSPORT_HEADERS = frozenset({"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"})


class CallEnded(Exception):
    """The client reset the call or went away while the service read its requests."""


def parse_timeout(value: str) -> float | None:
    """``grpc-timeout`` (1 to 8 digits and a unit) in seconds; None when malformed."""
    if 2 <= len(value) <= 9 and value[:-1].isdigit() and value[-1] in _TIMEOUT_UNITS:
        return int(value[:-1]) * _TIMEOUT_UNITS[value[-1]]
    return None


def percent_encode(message: str) -> str:
    """``grpc-message``'s encoding: printable ASCII but '%' as is, every other byte of its UTF-8 %XX."""
    raw = message.encode()[:1024]
    if all(0x20 <= b <= 0x7E and b != 0x25 for b in raw):
        return raw.decode("ascii")
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in raw)


def trailers(code: int, message: str = "", *, headers_sent: bool) -> bytes:
    fields = [] if headers_sent else [(":status", "200"), ("content-type", "application/grpc")]
    fields.append(("grpc-status", str(code)))
    if message:
        fields.append(("grpc-message", percent_encode(message)))
    return _encoder.encode(fields)


@dataclass(frozen=True)
class Method:
    name: str
    handler: Callable[..., Any]
    request_type: Any
    client_streaming: bool
    server_streaming: bool
    eager: bool = False


class CallContext:
    """What a service method reads of its call."""

    __slots__ = ("_stream", "_headers", "_deadline", "_loop", "_metadata", "_text")

    def __init__(self, stream: Stream, headers: dict[str, str], deadline: float | None,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._stream, self._headers, self._deadline, self._loop = stream, headers, deadline, loop
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None
        self._text: dict[str, str] | None = None

    @property
    def peer_address(self) -> tuple[str, int]:
        return self._stream.peer

    def peer(self) -> str:
        """As grpcio spells it: "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555"."""
        host, port = self._stream.peer
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The request's headers but the pseudo-headers and gRPC's own; ``-bin`` values decoded."""
        if self._metadata is None:
            out: list[tuple[str, str | bytes]] = []
            for name, value in self._stream.headers:
                if name.startswith(":") or name in _TRANSPORT_HEADERS:
                    continue
                if name.endswith("-bin"):
                    with contextlib.suppress(ValueError):
                        out.append((name, base64.b64decode(value + "=" * (-len(value) % 4))))
                    continue
                out.append((name, value))
            self._metadata = tuple(out)
        return self._metadata

    def header(self, name: str) -> str:
        """One text header of the request by its (lower-case) name, "" when it has none: what
        most calls read (``x-mq-client-id``), without building ``metadata``."""
        return self._headers.get(name, "")

    def metadata(self) -> dict[str, str]:
        """The text headers of ``invocation_metadata`` by name (one dict per call: do not change it)."""
        if self._text is None:
            self._text = {k: v for k, v in self.invocation_metadata() if isinstance(v, str)}
        return self._text

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - self._loop.time())


class Call:
    """One call on one stream: the stream's receiver, the service coroutine's runner."""

    __slots__ = ("_server", "_stream", "_method", "_context", "_buf", "_requests", "_ended", "_waiter", "_task",
                 "_deadline", "_deadline_timer", "_headers_sent", "_finished", "_inflate", "_failed")

    def __init__(self, server: "GrpcServer", stream: Stream, headers: dict[str, str], method: Method,
                 deadline: float | None, inflate: Callable[[bytes], bytes] | None,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._server = server
        self._stream = stream
        self._method = method
        self._context = CallContext(stream, headers, deadline, loop)
        self._buf = bytearray()
        self._requests: deque[Any] = deque()
        self._ended = False
        self._waiter: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._headers_sent = False
        self._finished = False
        self._failed = False
        self._inflate = inflate
        self._deadline = deadline
        self._deadline_timer: asyncio.TimerHandle | None = None  # armed once the call waits
        server.calls.add(self)
        if method.client_streaming:
            self._start(self._run_streaming_in())

    # -- the stream's receiver --------------------------------------------------------------------

    def data(self, data: bytes) -> None:
        if self._failed:
            return
        buf = self._buf
        if not buf and len(data) >= 5:  # the common case: one DATA frame holding one whole message
            compressed, length = _PREFIX.unpack_from(data)
            if len(data) == 5 + length and length <= self._server.max_message_bytes:
                self._message(compressed, data[5:])
                return
        buf += data
        limit = self._server.max_message_bytes
        while len(buf) >= 5:
            compressed, length = _PREFIX.unpack_from(buf)
            if length > limit:
                self._fail(RESOURCE_EXHAUSTED, f"a request message of {length} bytes, above the limit of {limit}")
                return
            if len(buf) < 5 + length:
                break
            payload = bytes(buf[5:5 + length])
            del buf[:5 + length]
            if not self._message(compressed, payload):
                return

    def _message(self, compressed: int, payload: bytes) -> bool:
        """One request message received whole: parsed and queued for the service (False: the
        call failed on it)."""
        if compressed:
            if self._inflate is None:
                self._fail(INTERNAL, "a compressed message without grpc-encoding")
                return False
            try:
                payload = self._inflate(payload)
            except (zlib.error, ValueError) as exc:
                self._fail(INTERNAL if isinstance(exc, zlib.error) else RESOURCE_EXHAUSTED,
                           f"a compressed request message could not be inflated: {exc}")
                return False
        try:
            request = self._method.request_type.FromString(payload)
        except DecodeError as exc:
            self._fail(INTERNAL, f"a request message that is not a {self._method.request_type.__name__}: {exc}")
            return False
        if not self._method.client_streaming and self._requests:
            self._fail(UNIMPLEMENTED, f"{self._method.name} takes one request message, got more")
            return False
        self._requests.append(request)
        self._wake()
        return True

    def end(self) -> None:
        self._ended = True
        if self._failed:
            return
        if self._buf:
            self._fail(INTERNAL, "the request ended inside a message")
            return
        if self._method.client_streaming:
            self._wake()
            return
        if not self._requests:
            self._fail(INTERNAL, f"{self._method.name}: the request ended without a message")
            return
        request = self._requests.popleft()
        if self._method.server_streaming:
            self._start(self._run_streaming_out(request))
        elif self._method.eager:
            self._start_eagerly(self._run_unary(request))
        else:
            self._start(self._run_unary(request))

    def reset(self, code: int) -> None:
        """The client reset the stream or the connection went: the call is cancelled."""
        self._finished = True
        self._cancel()
        self._wake(CallEnded(f"the client ended the call (HTTP/2 code {code})"))
        self._done()

    # -- running the service's coroutine -----------------------------------------------------------

    def _start(self, coro) -> None:
        self._task = asyncio.get_running_loop().create_task(coro, name=f"grpc {self._method.name}")
        self.arm_deadline()

    def _start_eagerly(self, coro) -> None:
        server = self._server
        parked = server.parked_list()
        try:
            self._task = start_eagerly(coro, name=f"grpc {self._method.name}", parked=parked)
        except Exception as exc:  # raised before its first wait: as from a plain call
            self._crashed(exc)
        if self._finished or self._deadline is None:
            return
        if self._task is None and parked is not None:  # parked in the read's round, which ends it mostly
            server.arm_after_round(self)
        else:  # it waits: now its deadline matters
            self.arm_deadline()

    def arm_deadline(self) -> None:
        """Past the call's deadline (if it has one) it is cancelled and answered DEADLINE_EXCEEDED."""
        if self._deadline is not None and self._deadline_timer is None and not self._finished:
            self._deadline_timer = asyncio.get_running_loop().call_at(self._deadline, self._deadline_passed)

    async def _run_unary(self, request: Any) -> None:
        try:
            response = await self._method.handler(request, self._context)
        except asyncio.CancelledError:
            return  # reset, deadline or shutdown: answered (or not) by whoever cancelled
        except Exception as exc:
            self._crashed(exc)
            return
        if self._finished:
            return
        # a handler may answer with its response already serialized (SendMessage does: service.py)
        payload = response if type(response) is bytes else response.SerializeToString()
        self._finished = True
        self._stream.send_all(((HEADERS, RESPONSE_HEADERS, False), (DATA, _PREFIX.pack(0, len(payload)) + payload, False),
                               (HEADERS, TRAILERS_OK, True)))
        self._done()

    async def _run_streaming_out(self, request: Any) -> None:
        await self._answer_stream(self._method.handler(request, self._context))

    async def _run_streaming_in(self) -> None:
        await self._answer_stream(self._method.handler(self._request_iterator(), self._context))

    async def _answer_stream(self, responses: AsyncIterator[Any]) -> None:
        stream = self._stream
        try:
            async for response in responses:
                if self._finished:
                    break
                payload = response.SerializeToString()
                message = (DATA, _PREFIX.pack(0, len(payload)) + payload, False)
                if self._headers_sent:
                    stream.send_all((message,))
                else:
                    self._headers_sent = True
                    stream.send_all(((HEADERS, RESPONSE_HEADERS, False), message))
                await stream.drained()
        except asyncio.CancelledError:
            return
        except (CallEnded, ConnectionResetError):
            return
        except Exception as exc:
            self._crashed(exc)
            return
        finally:
            with contextlib.suppress(Exception):
                await responses.aclose()  # type: ignore[attr-defined]
        self._answer(OK)

    async def _request_iterator(self) -> AsyncIterator[Any]:
        while True:
            while self._requests:
                yield self._requests.popleft()
            if self._ended or self._failed:
                return
            if self._finished:
                raise CallEnded("the call ended")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _wake(self, error: Exception | None = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    # -- ends ----------------------------------------------------------------------------------

    def _crashed(self, exc: BaseException) -> None:
        log.warning("gRPC %s failed: %s", self._method.name, exc, exc_info=exc)
        self._answer(UNKNOWN, f"{self._method.name} failed on the broker: {type(exc).__name__}: {exc}")

    def _fail(self, code: int, message: str) -> None:
        """The request is refused as it arrives: the call is answered and its coroutine cancelled."""
        self._failed = True
        self._buf.clear()
        self._cancel()
        self._wake()
        self._answer(code, message)

    def _deadline_passed(self) -> None:
        self._deadline_timer = None
        if not self._finished:
            self._cancel()
            self._answer(DEADLINE_EXCEEDED, "the call's deadline passed")

    def _answer(self, code: int, message: str = "") -> None:
        if self._finished:
            return
        self._finished = True
        block = TRAILERS_OK if code == OK and self._headers_sent else trailers(code, message,
                                                                             headers_sent=self._headers_sent)
        self._stream.send_headers(block, end_stream=True)
        self._done()

    def _cancel(self) -> None:
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _done(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._server.call_ended(self)

    def shut(self) -> None:
        """The server stops: the call is cancelled and answered UNAVAILABLE."""
        self._cancel()
        self._wake(CallEnded("the server is stopping"))
        self._answer(UNAVAILABLE, "the broker is shutting down")


class GrpcServer:
    """The calls of ``methods`` on the connections it is given (``connection()`` is the protocol
    factory of a listener); ``max_message_bytes`` bounds one request message, compressed or not."""

    def __init__(self, methods: dict[str, Method], max_message_bytes: int,
                 rounds: DispatchRounds | None = None) -> None:
        self.methods = methods
        self.max_message_bytes = max_message_bytes
        self._rounds = rounds
        self._parked: list[Coroutine[Any, Any, None]] | None = None  # eager calls parked in this read's round
        self._unarmed: list[Call] = []  # parked calls with a deadline: armed if the round does not end them
        self._eager_in_read = 0
        self._resumed: set[asyncio.Task] = set()
        self.calls: set[Call] = set()
        self.connections: set[Http2Connection] = set()
        self._idle: asyncio.Event | None = None  # set when the last call ends, while stopping

    def call_ended(self, call: "Call") -> None:
        self.calls.discard(call)
        if not self.calls and self._idle is not None:
            self._idle.set()

    def connection(self) -> Http2Connection:
        return Http2Connection(self._stream, on_open=self.connections.add, on_close=self.connections.discard,
                               hooks=self)

    # -- the store's dispatch round of one read (remoting/connection.py does the same) ------------

    def read_began(self) -> None:
        self._eager_in_read = 0  # the round opens with the read's second eager call (parked_list)

    def parked_list(self) -> "list[Coroutine[Any, Any, None]] | None":
        """Where an eager call started by this read parks (None: run it through). A read's first
        call runs through, as a remoting connection's lone request does; from the second on they
        are written together."""
        self._eager_in_read += 1
        if self._rounds is None or self._eager_in_read < 2:
            return None
        if self._parked is None:
            self._parked = []
            self._rounds.open_round()
        return self._parked

    def arm_after_round(self, call: "Call") -> None:
        """``call`` parked in this read's round: its deadline is armed only if the round's end
        leaves it running (most end there, and a timer armed and cancelled at once is waste)."""
        self._unarmed.append(call)

    def read_ended(self) -> None:
        parked, self._parked = self._parked, None
        if parked is None:
            return
        unarmed, self._unarmed = self._unarmed, []
        try:
            self._rounds.close_round()  # type: ignore[union-attr]
        finally:  # the parked calls go on (and answer) whatever the round did
            resumption = Resumption()
            for coro in parked:
                try:
                    resumption.resume(coro)
                except Exception:
                    log.exception("a gRPC call failed when resumed")
            for task in resumption.start():
                self._resumed.add(task)
                task.add_done_callback(self._resumed.discard)
            for call in unarmed:
                call.arm_deadline()

    def _stream(self, stream: Stream, end_stream: bool) -> None:
        headers = dict(stream.headers)
        refusal = self._refusal(headers)
        if refusal is not None:
            status, code, message, extra = refusal
            fields = [(":status", status)]
            if status == "200":
                fields += [("content-type", "application/grpc"), ("grpc-status", str(code)),
                           ("grpc-message", percent_encode(message)), *extra]
            stream.send_headers(_encoder.encode(fields), end_stream=True)
            return
        method = self.methods[headers[":path"]]
        loop = asyncio.get_running_loop()
        timeout = headers.get("grpc-timeout")
        deadline = None
        if timeout is not None:
            seconds = parse_timeout(timeout)
            if seconds is not None:
                deadline = loop.time() + seconds
        encoding = headers.get("grpc-encoding")
        inflate = None if encoding is None else inflater(encoding, self.max_message_bytes)
        call = Call(self, stream, headers, method, deadline, inflate, loop)
        stream.receiver = call
        if end_stream:
            call.end()

    def _refusal(self, headers: dict[str, str]) -> tuple[str, int, str, list] | None:
        """(HTTP status, gRPC status, message, extra headers) for a request that is not a call."""
        if headers.get(":method") != "POST":
            return "405", 0, "", []
        content_type = headers.get("content-type", "")
        if not content_type.startswith("application/grpc"):
            return "415", 0, "", []
        path = headers.get(":path", "")
        if path not in self.methods:
            return "200", UNIMPLEMENTED, f"method {path} is not served here", []
        encoding = headers.get("grpc-encoding", "identity")
        if encoding not in ("identity", "gzip", "deflate"):
            return "200", UNIMPLEMENTED, f"grpc-encoding {encoding} is not supported", [
                ("grpc-accept-encoding", ACCEPTED_ENCODINGS)]
        return None

    async def stop(self, grace: float) -> None:
        """No new calls (GOAWAY); calls in progress get ``grace`` seconds, then are cancelled and
        answered UNAVAILABLE; then the connections close."""
        for conn in list(self.connections):
            conn.goaway(NO_ERROR, "the broker is shutting down")
        if self.calls:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await within(self._idle.wait(), grace)
        for call in list(self.calls):
            call.shut()
        await asyncio.sleep(0)
        for conn in list(self.connections):
            conn.close()


def inflater(encoding: str, limit: int) -> Callable[[bytes], bytes] | None:
    """How a compressed message of ``encoding`` is inflated, at most ``limit`` bytes (ValueError above)."""
    if encoding == "identity":
        return None
    wbits = 31 if encoding == "gzip" else 15

    def inflate(data: bytes) -> bytes:
        inflating = zlib.decompressobj(wbits)
        out = inflating.decompress(data, limit + 1)
        if len(out) > limit or inflating.unconsumed_tail:
            raise ValueError(f"it inflates to more than {limit} bytes")
        return out

    return inflate


def service_methods(service: Any, descriptor: Any, message_types: Any, eager: frozenset[str] = frozenset()
                    ) -> dict[str, Method]:
    """The methods of ``descriptor`` (a protobuf ServiceDescriptor) that ``service`` has, by path;
    ``message_types``: the module of the generated request classes."""
    methods = {}
    for m in descriptor.methods:
        handler = getattr(service, m.name, None)
        if handler is None:
            continue
        methods[f"/{descriptor.full_name}/{m.name}"] = Method(
            m.name, handler, getattr(message_types, m.input_type.name), m.client_streaming, m.server_streaming,
            m.name in eager)
    return methods
