"""The server side of an HTTP/2 connection (RFC 9113), as much of it as gRPC uses.

One ``Http2Connection`` is the asyncio protocol of one accepted transport. It reads the
client's preface and frames, keeps both directions' flow-control windows, answers SETTINGS and
PING, and hands each request stream to ``on_stream`` once its header block is complete (HPACK,
hpack.py). What a stream receives goes to the stream's ``receiver`` (the gRPC call, server.py);
what the call answers leaves through ``Stream.send_headers`` / ``send_data``, which queue behind
the peer's windows and never block.

Frames written while a read is being handled leave in one write at its end; frames written at
other times leave together at the end of the loop's pass (the answers of sends one store write
completed). A protocol error closes the connection with GOAWAY naming it; a
stream error resets that stream alone. Server push and priorities are not used (PRIORITY frames
are read and ignored, as RFC 9113 lets a server do).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import Callable, Protocol

from ferrymq.grpc.hpack import Decoder, HeaderListTooLarge, HpackError

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x5, 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB

SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

DEFAULT_WINDOW = 65_535
MAX_WINDOW = (1 << 31) - 1
DEFAULT_MAX_FRAME = 16_384

# What this server announces. Receive windows are large and refunded as data arrives: a call
# holds at most one message (its size limit is the gRPC layer's), so the window is not what
# bounds memory; a small one would only cost round trips on large messages.
MAX_CONCURRENT_STREAMS = 1_000
INITIAL_WINDOW = 4 << 20
CONNECTION_WINDOW = 16 << 20
MAX_FRAME = 1 << 20
MAX_HEADER_LIST = 64 << 10
STREAM_REFUND_STEP = 16 << 10  # a stream's received bytes are given back in steps of at least this
PING_ACK_DELAY = 0.05  # at most this long a PING's ACK waits for frames to travel with
MAX_HELD_PING_ACKS = 8  # more PINGs than that unanswered: their ACKs leave at once

_FRAME_HEADER = struct.Struct(">BHBBI")  # length as 8 + 16 bits, type, flags, stream id
_SETTING = struct.Struct(">HI")
_U32 = struct.Struct(">I")


class ConnectionError_(Exception):
    """A connection error (RFC 9113 5.4.1): GOAWAY with ``code``, then the connection closes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame_header(kind: int, flags: int, stream_id: int, length: int) -> bytes:
    """The 9 octets before a frame's payload of ``length`` octets."""
    return _FRAME_HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return frame_header(kind, flags, stream_id, len(payload)) + payload


class Receiver(Protocol):
    """What a stream's data and end go to (the gRPC call)."""

    def data(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def reset(self, code: int) -> None: ...


class ReadHooks(Protocol):
    """Told when the frames of one read start and stop being handled (the gRPC server opens the
    store's dispatch round for the sends a read completes, as a remoting connection does)."""

    def read_began(self) -> None: ...

    def read_ended(self) -> None: ...


class _NoHooks:
    def read_began(self) -> None:
        pass

    def read_ended(self) -> None:
        pass


class Stream:
    """One request stream: its request headers, its receiver, and its send side (queued behind
    the peer's flow-control windows, in order: headers never overtake data)."""

    __slots__ = ("id", "headers", "receiver", "_conn", "window", "_queue", "_closed_local", "ended_by_peer",
                 "_drained", "unacked")

    def __init__(self, conn: "Http2Connection", stream_id: int, headers: list[tuple[str, str]]) -> None:
        self.id = stream_id
        self.headers = headers
        self.receiver: Receiver | None = None
        self._conn = conn
        self.window = conn.peer_initial_window
        self._queue: deque[tuple[int, bytes, bool]] = deque()  # (kind, payload, end_stream) waiting
        self._closed_local = False  # we sent END_STREAM or RST_STREAM
        self.ended_by_peer = False  # the peer sent END_STREAM (read here, set by closed_by_peer)
        self._drained: asyncio.Future | None = None
        self.unacked = 0  # received on this stream, not yet given back in a WINDOW_UPDATE

    @property
    def peer(self) -> tuple[str, int]:
        return self._conn.peer

    @property
    def open(self) -> bool:
        return not self._closed_local

    def send_headers(self, block: bytes, end_stream: bool = False) -> None:
        self._send(HEADERS, block, end_stream)

    def send_data(self, data: bytes, end_stream: bool = False) -> None:
        self._send(DATA, data, end_stream)

    def _send(self, kind: int, payload: bytes, end_stream: bool) -> None:
        self.send_all(((kind, payload, end_stream),))

    def send_all(self, items: "tuple[tuple[int, bytes, bool], ...] | list[tuple[int, bytes, bool]]") -> None:
        """(HEADERS or DATA, payload, end_stream) in order, written together as far as the windows let."""
        if self._closed_local:
            return  # reset or ended meanwhile: nothing more goes to the peer
        if not self._queue and self._conn.write_at_once(self, items):
            return
        was_waiting = bool(self._queue)
        for item in items:
            self._queue.append(item)
            if item[2]:
                self._closed_local = True
                break
        if not was_waiting:
            self._conn.flush_stream(self)

    def reset(self, code: int = CANCEL) -> None:
        """Ends the stream at once (RST_STREAM), dropping what waits for the peer's window."""
        if self._closed_local and not self._queue:
            self._conn.forget(self)
            return
        self._closed_local = True
        self._queue.clear()
        self._conn.write(frame(RST_STREAM, 0, self.id, _U32.pack(code)))
        self._conn.forget(self)

    async def drained(self) -> None:
        """Until what was sent so far has been handed to the transport and the transport is
        below its high-water mark: a streaming answer paces itself on this."""
        if self._queue:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)
        await self._conn.writable()

    def take_queue(self, budget: int, max_frame: int) -> tuple[list[bytes], int]:
        """Frames of what waits that fit ``budget`` (the connection's window) and the stream's own
        window; returns them and the flow-controlled bytes they use."""
        out: list[bytes] = []
        used = 0
        queue = self._queue
        while queue:
            kind, payload, end_stream = queue[0]
            if kind == HEADERS:
                out.extend(header_frames(self.id, payload, end_stream, max_frame))
                queue.popleft()
                continue
            room = min(self.window, budget - used)
            if len(payload) > room:
                if room <= 0:
                    break
                chunk, rest = payload[:room], payload[room:]
                out.extend(data_frames(self.id, chunk, False, max_frame))
                self.window -= room
                used += room
                queue[0] = (kind, rest, end_stream)
                break
            out.extend(data_frames(self.id, payload, end_stream, max_frame))
            self.window -= len(payload)
            used += len(payload)
            queue.popleft()
        if not queue and self._drained is not None:
            self._drained.set_result(None)
            self._drained = None
        return out, used

    @property
    def waiting(self) -> bool:
        return bool(self._queue)

    def end_local(self) -> None:
        """We sent END_STREAM (written by the connection at once, not queued)."""
        self._closed_local = True

    def closed_by_peer(self) -> None:
        self.ended_by_peer = True

    def lost(self) -> None:
        self._closed_local = True
        self._queue.clear()
        if self._drained is not None:
            self._drained.set_exception(ConnectionResetError("HTTP/2 stream ended"))
            self._drained.exception()  # retrieved: a drain nobody awaits must not log
            self._drained = None


def header_frames(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> list[bytes]:
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return [frame(HEADERS, flags | END_HEADERS, stream_id, block)]
    parts = [block[i:i + max_frame] for i in range(0, len(block), max_frame)]
    out = [frame(HEADERS, flags, stream_id, parts[0])]
    out.extend(frame(CONTINUATION, 0, stream_id, part) for part in parts[1:-1])
    out.append(frame(CONTINUATION, END_HEADERS, stream_id, parts[-1]))
    return out


def data_frames(stream_id: int, data: bytes, end_stream: bool, max_frame: int) -> list[bytes]:
    if len(data) <= max_frame:
        return [frame(DATA, END_STREAM if end_stream else 0, stream_id, data)]
    view = memoryview(data)
    last = len(data) - max_frame
    out = [frame(DATA, 0, stream_id, bytes(view[i:i + max_frame])) for i in range(0, last, max_frame)]
    tail_start = len(out) * max_frame
    out.append(frame(DATA, END_STREAM if end_stream else 0, stream_id, bytes(view[tail_start:])))
    return out


class Http2Connection(asyncio.Protocol):
    """``on_stream(stream, end_stream)``: a new request whose headers are complete; it sets the
    stream's receiver (or resets the stream). ``on_open`` / ``on_close(connection)``: the
    transport is there (after a TLS handshake) / gone."""

    def __init__(self, on_stream: Callable[[Stream, bool], None],
                 on_open: Callable[["Http2Connection"], None] = lambda c: None,
                 on_close: Callable[["Http2Connection"], None] = lambda c: None,
                 hooks: ReadHooks = _NoHooks()) -> None:
        self._on_stream = on_stream
        self._hooks = hooks
        self._on_open = on_open
        self._on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("", 0)
        self._buf = bytearray()
        self._preface_seen = False
        self._decoder = Decoder()
        self.streams: dict[int, Stream] = {}
        self._last_stream = 0  # the highest stream id the peer opened
        self._headers_of: tuple[int, int, bytearray] | None = None  # (stream, flags, block) awaiting CONTINUATION
        # flow control
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self._send_window = DEFAULT_WINDOW  # the connection's, towards the peer
        self._recv_unacked = 0  # received on the connection, not yet refunded
        self._blocked: dict[int, Stream] = {}  # streams with data waiting for a window
        # writes: the frames of one read, or of one pass of the loop, leave in one write
        self._out: list[bytes] = []
        self._reading = False
        self._flush_scheduled = False
        self._ping_acks: list[bytes] = []  # held until the next write (_ack_ping)
        self._ping_timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._writable: asyncio.Future | None = None
        self._going_away = False
        self._closed = False

    # -- transport events ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        settings = b"".join(_SETTING.pack(k, v) for k, v in (
            (SETTINGS_MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS), (SETTINGS_INITIAL_WINDOW_SIZE, INITIAL_WINDOW),
            (SETTINGS_MAX_FRAME_SIZE, MAX_FRAME), (SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
            (SETTINGS_ENABLE_PUSH, 0)))
        transport.write(frame(SETTINGS, 0, 0, settings) +  # type: ignore[attr-defined]
                        frame(WINDOW_UPDATE, 0, 0, _U32.pack(CONNECTION_WINDOW - DEFAULT_WINDOW)))
        self._on_open(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._reading = True
        try:
            self._hooks.read_began()
            try:
                self._read_frames()
            finally:
                self._hooks.read_ended()  # calls resumed there answer into this read's write
        except ConnectionError_ as exc:
            self._fail(exc.code, str(exc))
        finally:
            self._reading = False
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        streams, self.streams = self.streams, {}
        self._blocked.clear()
        for stream in streams.values():
            stream.lost()
            if stream.receiver is not None:
                stream.receiver.reset(CANCEL)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._on_close(self)

    def pause_writing(self) -> None:
        """A peer that does not read what we write (our answers, its PINGs' ACKs) gets nothing
        more read until it does: its requests cannot pile up answers in our memory."""
        self._paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if not self._closed:
            self.transport.resume_reading()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    async def writable(self) -> None:
        if self._paused and not self._closed:
            if self._writable is None:
                self._writable = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._writable)

    # -- writing --------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        if not self._reading and not self._flush_scheduled:  # answers finished in one pass leave together
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self._closed:
            out, self._out = self._out, []
            if self._ping_acks:  # after the DATA they travel with (see _ack_ping); the timer finds none
                out.extend(self._ping_acks)
                self._ping_acks = []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _ack_ping(self, payload: bytes) -> None:
        """A PING's ACK leaves with the next frames we write, or after PING_ACK_DELAY. gRPC clients
        (grpc-java, grpc-go) ping on each DATA frame they read while no ping of theirs is out, to
        measure the bandwidth-delay product: acknowledged alone, each answer to a lone sender
        costs a second write and a second wake-up on both sides. Travelling after the next
        answer's DATA, the ACK also keeps the client from pinging on that DATA."""
        self._ping_acks.append(frame(PING, ACK, 0, payload))
        if len(self._ping_acks) >= MAX_HELD_PING_ACKS:
            self._send_ping_acks()
        elif self._ping_timer is None:  # left to run out when the ACKs left earlier: no timer per PING
            self._ping_timer = asyncio.get_running_loop().call_later(PING_ACK_DELAY, self._send_ping_acks)

    def _send_ping_acks(self) -> None:
        self._ping_timer = None
        if self._ping_acks and not self._closed:
            acks, self._ping_acks = self._ping_acks, []
            self._out.extend(acks)
            if not self._reading:
                self._flush()

    def write_at_once(self, stream: Stream, items: "tuple[tuple[int, bytes, bool], ...] | list[tuple[int, bytes, bool]]"
                      ) -> bool:
        """``items`` of a stream with nothing queued, written as one frame each when every one fits
        a frame and their DATA fits both windows (a unary call's whole answer, mostly); False,
        with nothing written, when they do not (``send_all`` queues them then)."""
        max_frame = self.peer_max_frame
        pack = _FRAME_HEADER.pack
        sid = stream.id
        data_bytes = 0
        ended = False
        out = []
        for kind, payload, end_stream in items:  # HEADERS or DATA, each frame's header packed here (no call per frame)
            length = len(payload)
            if length > max_frame:
                return False
            if kind == DATA:
                data_bytes += length
                flags = END_STREAM if end_stream else 0
            else:
                flags = END_HEADERS | END_STREAM if end_stream else END_HEADERS
            out.append(pack(length >> 16, length & 0xFFFF, kind, flags, sid))
            out.append(payload)
            if end_stream:
                ended = True
                break
        if data_bytes > stream.window or data_bytes > self._send_window:
            return False
        if ended:
            stream.end_local()
        stream.window -= data_bytes
        self._send_window -= data_bytes
        self.write(b"".join(out))
        self._settle(stream)
        return True

    def flush_stream(self, stream: Stream) -> None:
        frames, used = stream.take_queue(self._send_window, self.peer_max_frame)
        self._send_window -= used
        if frames:
            self.write(b"".join(frames))
        self._settle(stream)

    def _settle(self, stream: Stream) -> None:
        """After a stream's frames went out: blocked on a window, or done with."""
        if stream.waiting:
            self._blocked[stream.id] = stream
        else:
            self._blocked.pop(stream.id, None)
            if not stream.open:
                if not stream.ended_by_peer:  # answered before the request ended: it needs no more
                    self.write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
                self.forget(stream)

    def forget(self, stream: Stream) -> None:
        """The stream is done on our side; once the peer's side is done too, it is gone."""
        if not stream.waiting:
            self.streams.pop(stream.id, None)
            self._blocked.pop(stream.id, None)
            if self._going_away and not self.streams:
                self.close()

    def goaway(self, code: int = NO_ERROR, message: str = "") -> None:
        """No new streams from now on; the connection closes once its streams are done."""
        if self._closed or self._going_away:
            return
        self._going_away = True
        self.write(frame(GOAWAY, 0, 0, _U32.pack(self._last_stream) + _U32.pack(code) + message.encode()[:256]))
        if not self.streams:
            self.close()

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    def _fail(self, code: int, message: str) -> None:
        log.info("HTTP/2 connection from %s:%d closed: %s", *self.peer, message)
        self._going_away = True
        self._out.append(frame(GOAWAY, 0, 0, _U32.pack(self._last_stream) + _U32.pack(code) + message.encode()[:256]))
        self._flush()
        self.close()

    # -- reading --------------------------------------------------------------------------------

    def _read_frames(self) -> None:
        buf = self._buf
        pos = 0
        if not self._preface_seen:
            if len(buf) < len(PREFACE):
                if not PREFACE.startswith(bytes(buf)):
                    raise ConnectionError_(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                return
            if buf[:len(PREFACE)] != PREFACE:
                raise ConnectionError_(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            self._preface_seen = True
            pos = len(PREFACE)
        end = len(buf)
        try:
            while end - pos >= 9 and not self._closed:
                high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(buf, pos)
                length = (high << 16) | low
                if length > MAX_FRAME:
                    raise ConnectionError_(FRAME_SIZE_ERROR, f"a frame of {length} bytes (at most {MAX_FRAME})")
                if end - pos - 9 < length:
                    break
                payload = bytes(buf[pos + 9:pos + 9 + length])
                pos += 9 + length
                self._frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        finally:
            del buf[:pos]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._headers_of is not None and kind != CONTINUATION:
            raise ConnectionError_(PROTOCOL_ERROR, "a header block interrupted before its END_HEADERS")
        if kind == DATA:
            self._data(flags, stream_id, payload)
        elif kind == HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == PING:
            if stream_id or len(payload) != 8:
                raise ConnectionError_(PROTOCOL_ERROR if stream_id else FRAME_SIZE_ERROR, "a malformed PING")
            if not flags & ACK:
                self._ack_ping(payload)
        elif kind == RST_STREAM:
            if not stream_id or len(payload) != 4:
                raise ConnectionError_(PROTOCOL_ERROR if not stream_id else FRAME_SIZE_ERROR, "a malformed RST_STREAM")
            self._reset_by_peer(stream_id, _U32.unpack(payload)[0])
        elif kind == GOAWAY:
            if stream_id:
                raise ConnectionError_(PROTOCOL_ERROR, "GOAWAY on a stream")
            self._going_away = True  # the client opens no more streams; ours finish
            if not self.streams:
                self.close()
        elif kind == PRIORITY:
            if not stream_id or len(payload) != 5:
                raise ConnectionError_(PROTOCOL_ERROR, "a malformed PRIORITY")
        elif kind == PUSH_PROMISE:
            raise ConnectionError_(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # other frame types are ignored (RFC 9113 5.5)

    def _unpad(self, payload: bytes) -> bytes:
        """A PADDED frame's payload without its padding."""
        if not payload or payload[0] >= len(payload):
            raise ConnectionError_(PROTOCOL_ERROR, "padding longer than the frame")
        return payload[1:len(payload) - payload[0]]

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "DATA on stream 0")
        self._refund(len(payload))
        stream = self.streams.get(stream_id)
        data = self._unpad(payload) if flags & PADDED else payload
        if stream is None:
            if stream_id > self._last_stream:
                raise ConnectionError_(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream we ended or reset: what the peer sent before it knew is ignored
        if stream.ended_by_peer:
            self.write(frame(RST_STREAM, 0, stream_id, _U32.pack(STREAM_CLOSED)))
            return
        end = bool(flags & END_STREAM)
        if not end:  # the stream's window, refunded as it is used (in steps: no update per small frame)
            stream.unacked += len(payload)
            if stream.unacked >= STREAM_REFUND_STEP:
                self.write(frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.unacked)))
                stream.unacked = 0
        receiver = stream.receiver
        if data and receiver is not None:
            receiver.data(data)
        if end:
            stream.closed_by_peer()
            if receiver is not None:
                receiver.end()

    def _refund(self, n: int) -> None:
        self._recv_unacked += n
        if self._recv_unacked >= CONNECTION_WINDOW // 4:
            self.write(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._recv_unacked)))
            self._recv_unacked = 0

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS on stream 0")
        block = self._unpad(payload) if flags & PADDED else payload
        if flags & PRIORITY_FLAG:
            if len(block) < 5:
                raise ConnectionError_(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            block = block[5:]
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, block)
        else:
            self._headers_of = (stream_id, flags, bytearray(block))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        pending = self._headers_of
        if pending is None or pending[0] != stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        pending[2].extend(payload)
        if len(pending[2]) > 4 * MAX_HEADER_LIST:
            raise ConnectionError_(ENHANCE_YOUR_CALM, "a header block without end")
        if flags & END_HEADERS:
            self._headers_of = None
            self._header_block(stream_id, pending[1], bytes(pending[2]))

    def _header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        end_stream = bool(flags & END_STREAM)
        try:
            headers = self._decoder.decode(block, MAX_HEADER_LIST)
            too_large = False
        except HeaderListTooLarge:
            headers, too_large = [], True  # the table stayed in step: a stream error only
        except HpackError as exc:
            raise ConnectionError_(COMPRESSION_ERROR, f"header block: {exc}") from None
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers: gRPC clients send none, but they would end the request
            if not end_stream:
                raise ConnectionError_(PROTOCOL_ERROR, f"a second header block on stream {stream_id} without END_STREAM")
            stream.closed_by_peer()
            if stream.receiver is not None:
                stream.receiver.end()
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream:
            raise ConnectionError_(PROTOCOL_ERROR, f"HEADERS opening stream {stream_id}, not a new client stream")
        self._last_stream = stream_id
        if self._going_away:
            self.write(frame(RST_STREAM, 0, stream_id, _U32.pack(REFUSED_STREAM)))
            return
        if too_large or len(self.streams) >= MAX_CONCURRENT_STREAMS:
            self.write(frame(RST_STREAM, 0, stream_id, _U32.pack(REFUSED_STREAM if not too_large else PROTOCOL_ERROR)))
            return
        stream = Stream(self, stream_id, headers)
        self.streams[stream_id] = stream
        if end_stream:
            stream.closed_by_peer()
        self._on_stream(stream, end_stream)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionError_(FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise ConnectionError_(FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        for i in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, i)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionError_(FLOW_CONTROL_ERROR, f"initial window {value} above 2^31-1")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for stream in self.streams.values():
                    stream.window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= (1 << 24) - 1:
                    raise ConnectionError_(PROTOCOL_ERROR, f"max frame size {value} out of range")
                self.peer_max_frame = value
            elif key == SETTINGS_ENABLE_PUSH and value > 1:
                raise ConnectionError_(PROTOCOL_ERROR, f"enable push {value}")
            # HEADER_TABLE_SIZE: our encoder never indexes; the others bound what we would push
        self.write(frame(SETTINGS, ACK, 0))
        self._unblock()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError_(FRAME_SIZE_ERROR, "a WINDOW_UPDATE not of 4 bytes")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise ConnectionError_(PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ConnectionError_(FLOW_CONTROL_ERROR, "the connection window above 2^31-1")
            self._unblock()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return  # a stream we finished: its updates may still be on their way
        if not increment or stream.window + increment > MAX_WINDOW:
            stream.reset(PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR)
            if stream.receiver is not None:
                stream.receiver.reset(CANCEL)
            return
        stream.window += increment
        if stream.waiting:
            self.flush_stream(stream)

    def _unblock(self) -> None:
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                break
            self.flush_stream(stream)

    def _reset_by_peer(self, stream_id: int, code: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            if stream_id > self._last_stream:
                raise ConnectionError_(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
            return
        self._blocked.pop(stream_id, None)
        stream.lost()
        if stream.receiver is not None:
            stream.receiver.reset(code)
        if self._going_away and not self.streams:
            self.close()
