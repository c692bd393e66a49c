"""One remoting connection, used alike by servers and clients.

Both ends of a RocketMQ connection send requests: a broker asks consumers things
(NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO, ...) over the connection the
client opened. So a Connection both issues requests (invoke*) and serves incoming ones
through a RequestHandler, whichever side created it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Collection, Coroutine, Protocol, cast

from ferrymq.common.eager import Resumption, start_eagerly
from ferrymq.common.tasks import within
from ferrymq.remoting.codes import DEFAULT_MAX_FRAME, FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from ferrymq.remoting.errors import (
    FrameError,
    FrameTooLargeError,
    HeaderFieldError,
    RemotingConnectionError,
    RemotingError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)
from ferrymq.remoting.permits import Permits
from ferrymq.remoting.response_table import ResponseTable, next_opaque

log = logging.getLogger(__name__)

RequestHandler = Callable[[RemotingCommand, "Connection"], Awaitable["RemotingCommand | None"]]
CloseListener = Callable[["Connection"], None]
ResponseCallback = Callable[["RemotingCommand | None", "BaseException | None"], None]


class DispatchRounds(Protocol):
    """Told when a connection starts and ends dispatching the requests of one read, when it
    holds more than one. Eager requests may park meanwhile (common/eager.py); the connection
    resumes them right after ``close_round``, before the read's answers leave. The broker's
    store writes the sends of a read together so (store/asyncio_store.py)."""

    def open_round(self) -> None: ...

    def close_round(self) -> None: ...


# Java client defaults for in-flight async and oneway requests (docs/wire-format.md#server-handling-rules).
DEFAULT_PERMITS = 65535

# How long a closing connection may take to flush what is already buffered before the
# transport is aborted; a peer that stopped reading must not keep stop() waiting.
_CLOSE_GRACE = 1.0
_HANDLER_GRACE = 2.0  # how long a local close waits for requests already being served
# Requests served at once on one connection (held pulls included); at the limit the reader
# stops reading, so a peer that floods requests meets TCP back-pressure, not our memory.
MAX_HANDLERS = 8192


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """Java's answer to a code nobody processes (the leading space is Java's too)."""
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")


async def _serve_nothing(request: RemotingCommand, connection: Connection) -> RemotingCommand:
    return not_supported(request)


def _address(info: Any) -> tuple[str, int]:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])  # IPv6 adds flowinfo and scope id: dropped
    return "", 0


class Connection(asyncio.Protocol):
    """A framed RocketMQ remoting connection: the asyncio protocol of its transport.

    Frames are decoded in ``data_received`` and each request handed to its own task, with no
    stream layer in between (a StreamReader costs a future and a task wake-up per read).
    ``opened`` is called once the transport is there (addresses known), before any frame is
    handled, so listeners and attributes set in it are in place for the first request.
    """

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        async_permits: int = DEFAULT_PERMITS,
        oneway_permits: int = DEFAULT_PERMITS,
        opened: Callable[["Connection"], None] | None = None,
        eager_codes: Collection[int] = (),
        rounds: DispatchRounds | None = None,
    ) -> None:
        self.remote_address: tuple[str, int] = ("", 0)
        self.local_address: tuple[str, int] = ("", 0)
        self.attributes: dict[str, Any] = {}
        self._peer = "?"
        self._transport: asyncio.Transport | None = None
        # The transport's loop, known from connection_made (asking asyncio for the running loop
        # costs a getpid system call: it was 2 % of a pull's time when asked per request).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handler = handler or _serve_nothing
        self._opened = opened
        self._eager_codes = eager_codes  # requests served at once, a task only if they wait
        self._rounds = rounds  # told of reads with several requests (eager ones may park meanwhile)
        self._max_frame = max_frame
        self._decoder = FrameDecoder(max_frame)
        self._responses = ResponseTable(self._peer)
        self._async_permits = Permits(async_permits)
        self._oneway_permits = Permits(oneway_permits)
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._reading_paused = False  # by us: too many requests being served
        self._writing_paused = False  # by the transport: its buffer is over the high-water mark
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.last_active = time.monotonic()  # last byte read or frame written (idle detection)
        self.last_received = self.last_active  # last byte read (is the peer silent?)
        self._close_listeners: list[CloseListener] = []
        self._closed = False
        # Frames written in one pass of the event loop leave in one socket write: under
        # load many responses complete together, and a syscall per frame dominated.
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._gathering = False  # inside data_received: answers wait for the end of the read
        self._closed_event = asyncio.Event()
        self._lost = asyncio.Event()  # the transport is gone (connection_lost ran)
        self._closer_task: asyncio.Task[None] | None = None

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's, uvloop's or TLS's; uvloop's do not subclass asyncio.Transport).
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        self.remote_address = _address(transport.get_extra_info("peername"))
        self.local_address = _address(transport.get_extra_info("sockname"))
        self._peer = f"{self.remote_address[0]}:{self.remote_address[1]}"
        self._responses = ResponseTable(self._peer)  # nothing was sent before this
        if self._opened is not None:
            self._opened(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.last_active = self.last_received = time.monotonic()
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("closing connection with %s: bad frame: %s", self._peer, exc)
            self._shutdown(f"bad frame: {exc}")
            return
        # Answers given while these frames are dispatched (eager requests) are gathered and
        # leave in one write when all are dispatched: no syscall each, no extra loop pass.
        self._gathering = True
        rounds = self._rounds if len(commands) > 1 else None
        parked: list[Coroutine[Any, Any, None]] | None = None  # requests parked in this read's round
        try:
            if rounds is not None:
                parked = []
                rounds.open_round()
            for command in commands:
                command.received_at = self.last_active
                self._dispatch(command, parked)
        except Exception:
            log.exception("reader of %s crashed", self._peer)  # a bug of ours: be loud
            self._shutdown("reader crashed")
        finally:
            if rounds is not None and parked is not None:
                self._end_round(rounds, parked)
            self._gathering = False
            if self._outbox and not self._flush_scheduled:
                self._flush_outbox()

    def _end_round(self, rounds: DispatchRounds, parked: list[Coroutine[Any, Any, None]]) -> None:
        try:
            rounds.close_round()
        finally:  # the parked requests go on (and answer) whatever the round did
            # Those that then wait for the same thing (one fsync for the round) wait together.
            resumption = Resumption(self._write_at_end_of_pass)
            for coro in parked:
                try:
                    resumption.resume(coro)
                except Exception:
                    log.exception("request of %s failed when resumed", self._peer)
            for task in resumption.start():
                self._track(task)

    def eof_received(self) -> bool:
        return False  # the peer is done sending: close our side too (RocketMQ closes the channel)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()
        self._wake_drain_waiters()
        self._shutdown(f"read failed: {exc!r}" if exc is not None else "closed by peer")

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake_drain_waiters()

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark (StreamWriter.drain)."""
        while self._writing_paused and not self._lost.is_set():
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
        if self._lost.is_set():
            raise ConnectionResetError(f"connection to {self._peer} lost")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Connection {self._peer} {state}>"

    @property
    def secure(self) -> bool:
        """Whether this connection speaks TLS."""
        return self._transport is not None and self._transport.get_extra_info("ssl_object") is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_requests(self) -> int:
        """Requests sent on this connection that still wait for their response."""
        return len(self._responses)

    def add_close_listener(self, listener: CloseListener) -> None:
        """Call `listener(connection)` once the connection closes (soon, if it already has)."""
        if self._closed:
            asyncio.get_running_loop().call_soon(self._notify_close_listener, listener)
        else:
            self._close_listeners.append(listener)

    # --- outgoing requests ------------------------------------------------------------------

    async def invoke(self, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response.

        Raises RemotingTimeoutError after `timeout` seconds and RemotingConnectionError
        when the connection is or becomes closed.
        """
        return await self._send_request(request, timeout)

    def invoke_async(
        self,
        request: RemotingCommand,
        timeout: float = 3.0,
        callback: ResponseCallback | None = None,
    ) -> asyncio.Future[RemotingCommand]:
        """Send a request without waiting; the future (and `callback`) get the outcome.

        Every failure, RemotingTooMuchRequestError included, is delivered through the
        future rather than raised here: a plain function cannot wait for a permit, and one
        error path is simpler for callers. The callback receives (response, None) or
        (None, error); cancelling the future gives it a CancelledError.
        """
        future: asyncio.Future[RemotingCommand]
        if self._async_permits.try_acquire():
            try:
                future = self._send_request(request, timeout)
            except BaseException as exc:
                self._async_permits.release()
                if not isinstance(exc, RemotingError):
                    raise  # a programming error (e.g. a body that is not bytes): fail loudly
                future = asyncio.get_running_loop().create_future()
                future.set_exception(exc)
            else:
                future.add_done_callback(self._release_async_permit)
        else:
            # All permits taken: only now pay for a task that waits for one.
            future = asyncio.get_running_loop().create_task(self._invoke_when_permitted(request, timeout))
        if callback is not None:
            future.add_done_callback(partial(deliver_outcome, callback))
        return future

    async def invoke_oneway(self, request: RemotingCommand, timeout: float = 3.0) -> None:
        """Send a request the peer must not answer; returns once it is handed to the socket.

        `timeout` bounds the wait for a oneway permit and for write back-pressure.
        """
        request.flag |= FLAG_ONEWAY
        request.opaque = next_opaque()
        frame = self._encode(request)
        deadline = asyncio.get_running_loop().time() + timeout
        async with self._permit(self._oneway_permits, timeout, "invokeOneway"):
            self._write(frame)
            try:
                async with asyncio.timeout_at(deadline):
                    await self._drain()
            except TimeoutError:
                raise RemotingTimeoutError(f"invokeOneway: {self._peer} did not take the request in time") from None
            except OSError as exc:
                raise RemotingConnectionError(f"invokeOneway: write to {self._peer} failed: {exc}") from exc

    def _send_request(self, request: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        # Awaiting the response bounds how much an invoker can have in flight, so the
        # write is not followed by drain(): the deadline covers a stalled peer as well.
        self._check_open()
        request.opaque = next_opaque()
        frame = self._encode(request)
        future = self._responses.add(request.opaque, request.code, timeout)
        self._enqueue(frame)
        return future

    async def _invoke_when_permitted(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        # Like Java, the wait for a permit counts against the request's timeout.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._permit(self._async_permits, timeout, "invokeAsync"):
            return await self._send_request(request, deadline - loop.time())

    @contextlib.asynccontextmanager
    async def _permit(self, permits: Permits, timeout: float, what: str) -> AsyncIterator[None]:
        if not await permits.acquire(timeout):
            raise RemotingTooMuchRequestError(f"{what}: no free permit within {timeout}s on {self._peer}")
        try:
            yield
        finally:
            permits.release()

    def _release_async_permit(self, _future: asyncio.Future[RemotingCommand]) -> None:
        self._async_permits.release()

    # --- outgoing responses ------------------------------------------------------------------

    async def send_response(self, response: RemotingCommand) -> None:
        """Write a response (e.g. one a processor produces later, like a held pull).

        A response for a peer that has gone away is dropped: nobody is left to read it.
        """
        if self._closed:
            log.debug("dropping response %d for closed connection %s", response.opaque, self._peer)
            return
        self._enqueue(self._encode(response))
        if not self._writing_paused:
            return
        try:
            # Responses are the one output nobody else bounds, so honour back-pressure.
            await self._drain()
        except OSError as exc:
            log.debug("writing response to %s failed: %s", self._peer, exc)

    # --- incoming frames ----------------------------------------------------------------------

    def _dispatch(self, command: RemotingCommand, parked: list[Coroutine[Any, Any, None]] | None = None) -> None:
        if command.is_response:
            if not self._responses.complete(command):
                log.debug("dropping response with unknown or expired opaque %d from %s", command.opaque, self._peer)
            return
        # Each request in its own task: a slow processor must never hold up the reader,
        # heartbeats or other requests on this connection. Codes the server marked eager
        # (sends) run at once and become a task only if they wait (a flush, a full writer).
        if command.code in self._eager_codes:
            task = start_eagerly(self._serve(command), parked=parked)
            if task is not None:  # it waits (most sends answer at once)
                self._track(task)
        else:
            self._track((self._loop or asyncio.get_running_loop()).create_task(self._serve(command)))

    def _track(self, task: asyncio.Task[None]) -> None:
        """Count a request being served in a task (reading pauses when too many are)."""
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_done)
        if len(self._handler_tasks) >= MAX_HANDLERS and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handler_tasks.discard(task)
        if self._reading_paused and len(self._handler_tasks) < MAX_HANDLERS and not self._closed:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()

    async def _serve(self, request: RemotingCommand) -> None:
        try:
            response = await self._handler(request, self)
        except HeaderFieldError as exc:
            log.warning("request %d from %s rejected: %s", request.code, self._peer, exc)
            response = request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:
            log.warning("processor of request %d from %s failed", request.code, self._peer, exc_info=True)
            response = request.response(ResponseCode.SYSTEM_ERROR, str(exc) or type(exc).__name__)
        if response is None or request.is_oneway:
            return
        if not isinstance(response, RemotingCommand):
            log.warning("processor of request %d returned %r, not a command", request.code, type(response))
            response = request.response(ResponseCode.SYSTEM_ERROR, "processor returned no command")
        # Whatever the processor built, it answers this request, in its serialization.
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        response.serialize_type = request.serialize_type
        try:
            await self.send_response(response)
        except FrameError as exc:
            log.warning("response %d to %s cannot be sent: %s", request.code, self._peer, exc)
            await self.send_response(request.response(ResponseCode.SYSTEM_ERROR, f"response not sendable: {exc}"))

    # --- shared helpers ----------------------------------------------------------------------

    def _encode(self, command: RemotingCommand) -> bytes:
        frame = encode_frame(command)
        # The peer would close the connection on it (and fail everything else in flight),
        # so refuse here with an error that names the culprit.
        if len(frame) > self._max_frame:
            raise FrameTooLargeError(f"frame of {len(frame)} bytes exceeds the maximum of {self._max_frame}")
        return frame

    def _check_open(self) -> None:
        if self._closed:
            raise RemotingConnectionError(f"connection to {self._peer} is closed")

    def _write(self, frame: bytes) -> None:
        self._check_open()
        self._enqueue(frame)

    def _enqueue(self, frame: bytes) -> None:
        self.last_active = time.monotonic()
        # The first frame of a loop pass leaves at once (no added latency); frames that
        # follow in the same pass are queued and leave together at its end. Whole frames,
        # in order, so concurrent writers never interleave.
        if self._flush_scheduled or self._gathering:
            self._outbox.append(frame)
            return
        if self._transport is None:
            raise RemotingConnectionError("connection is not open yet")
        self._transport.write(frame)
        self._schedule_flush()

    def _write_at_end_of_pass(self) -> None:
        """Frames enqueued from now to the end of this loop pass leave in one write, the first
        one included: a round's answers after their fsync (and other rounds' answered by the
        same fsync) come together."""
        if not self._flush_scheduled:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Frames enqueued from now on queue in the outbox, which leaves at the end of this pass."""
        self._flush_scheduled = True
        (self._loop or asyncio.get_running_loop()).call_soon(self._flush_outbox)

    def _flush_outbox(self) -> None:
        self._flush_scheduled = False
        if not self._outbox:
            return
        frames, self._outbox = self._outbox, []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    # --- closing ------------------------------------------------------------------------------

    async def close(self, grace: float = _HANDLER_GRACE) -> None:
        """Close, letting requests already read finish for up to ``grace`` seconds."""
        self._shutdown("closed locally")
        current = asyncio.current_task()
        handlers = [t for t in self._handler_tasks if t is not current and not t.done()]
        if handlers:
            _, late = await asyncio.wait(handlers, timeout=grace)
            for task in late:
                log.warning("request handler for %s still running after %.0fs at close; cancelled", self._peer, grace)
                task.cancel()
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait until the connection is closed and its tasks have finished."""
        await self._closed_event.wait()
        current = asyncio.current_task()
        tasks = [
            task
            for task in (self._closer_task, *self._handler_tasks)
            if task is not None and task is not current and not task.done()
        ]
        if tasks:
            await asyncio.wait(tasks)

    def _shutdown(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        log.debug("connection with %s closed: %s", self._peer, reason)
        self._responses.fail_all(lambda: RemotingConnectionError(f"connection to {self._peer} closed: {reason}"))
        # Requests already read keep running: a oneway send whose sender hung up right
        # after writing it must still be stored. Their answers are dropped.
        self._flush_outbox()  # what was written before the close still goes out
        if self._transport is not None:
            self._transport.close()
        self._closer_task = asyncio.get_running_loop().create_task(self._finish_transport())
        self._closed_event.set()
        listeners, self._close_listeners = self._close_listeners, []
        for listener in listeners:
            self._notify_close_listener(listener)

    def _notify_close_listener(self, listener: CloseListener) -> None:
        try:
            listener(self)
        except Exception:
            log.warning("close listener of %s failed", self._peer, exc_info=True)

    async def _finish_transport(self) -> None:
        if self._transport is None:
            return
        try:
            await within(self._lost.wait(), _CLOSE_GRACE)
        except TimeoutError:
            log.debug("%s did not take its pending data in time; aborting", self._peer)
            self._transport.abort()


async def open_connection(host: str, port: int, handler: RequestHandler | None = None, *,
                          ssl: Any = None, server_hostname: str | None = None, **options: Any) -> Connection:
    """Dial ``host:port`` and return the connection (``options``: Connection's keywords)."""
    _, connection = await asyncio.get_running_loop().create_connection(
        partial(Connection, handler, **options), host, port, ssl=ssl, server_hostname=server_hostname)
    return connection


def deliver_outcome(callback: ResponseCallback, future: asyncio.Future[RemotingCommand]) -> None:
    """Done-callback adapter: call `callback(response, error)` with the future's outcome."""
    if future.cancelled():
        response, error = None, asyncio.CancelledError()
    else:
        error = future.exception()
        response = None if error is not None else future.result()
    try:
        callback(response, error)
    except Exception:
        log.warning("response callback failed", exc_info=True)
