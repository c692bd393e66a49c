"""FerryMQ's own gRPC server (ferrymq/grpc/server.py on http2.py), on a real socket, spoken to by
grpcio's client (C-core) and by raw HTTP/2 frames: what a client sees of calls that go wrong
(unknown methods, oversized or malformed messages, deadlines, cancellations, a stopping server)
and of the connection itself (a bad preface, PING). The official 5.x clients (Java, Python,
Node) run against it in tests/compat; the v2 service's own behaviour is test_grpc_endpoint.py."""

from __future__ import annotations

import asyncio
import socket
import struct

import grpc
import pytest

from ferrymq.grpc.hpack import Decoder, Encoder
from ferrymq.grpc.protocol import pb, rpc, spb
from ferrymq.grpc.server import GrpcServer, service_methods
from testkit.wait import wait_until

LIMIT = 64 * 1024


class Service:
    """A few v2 methods, each showing one kind of call."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.metadata: dict[str, str | bytes] = {}

    async def Heartbeat(self, request: spb.HeartbeatRequest, context) -> spb.HeartbeatResponse:
        self.metadata = dict(context.invocation_metadata())
        if request.group.name == "slow":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.append("Heartbeat")
                raise
        if request.group.name == "crash":
            raise RuntimeError("boom")
        if request.group.name == "large":  # an answer of many frames, beyond the client's first window
            return spb.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message="x" * 300_000))
        return spb.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message=request.group.name))

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context):
        for i in range(request.batch_size):
            yield spb.ReceiveMessageResponse(message=pb.Message(body=bytes([i % 256]) * (256 * 1024)))
        if request.group.name == "hold":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.append("ReceiveMessage")
                raise

    async def Telemetry(self, requests, context):
        async for command in requests:
            yield spb.TelemetryCommand(status=pb.Status(code=pb.Code.OK, message=command.status.message))


@pytest.fixture
async def served():
    service = Service()
    server = GrpcServer(service_methods(service, spb.DESCRIPTOR.services_by_name["MessagingService"], spb), LIMIT)
    listener = await asyncio.get_running_loop().create_server(server.connection, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield service, server, f"127.0.0.1:{port}"
    finally:
        listener.close()
        await server.stop(grace=0.1)
        await listener.wait_closed()


@pytest.fixture
async def stub(served):
    async with grpc.aio.insecure_channel(served[2]) as channel:
        yield rpc.MessagingServiceStub(channel)


def heartbeat(group: str = "g") -> spb.HeartbeatRequest:
    return spb.HeartbeatRequest(group=pb.Resource(name=group))


async def test_a_unary_call_gets_its_answer_and_the_metadata_reaches_the_service(served, stub):
    service = served[0]
    answer = await stub.Heartbeat(heartbeat("hello"), metadata=(("x-mq-client-id", "c@1"), ("trace-bin", b"\x00\xff")),
                                  timeout=5)
    assert answer.status.message == "hello"
    assert service.metadata["x-mq-client-id"] == "c@1"
    assert service.metadata["trace-bin"] == b"\x00\xff"


async def test_a_unary_answer_larger_than_a_frame_and_the_window_arrives_whole(served, stub):
    # (a small answer leaves as three frames at once; this one is queued behind the windows)
    answers = await asyncio.gather(*(stub.Heartbeat(heartbeat(group)) for group in ("large", "g", "large")))
    assert [a.status.message for a in answers] == ["x" * 300_000, "g", "x" * 300_000]


async def test_a_method_the_server_does_not_have_is_unimplemented(served):
    async with grpc.aio.insecure_channel(served[2]) as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchCall",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=spb.HeartbeatResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await call(heartbeat(), timeout=5)
        assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "NoSuchCall" in failure.value.details()
        absent = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute",  # in the service's
                                     request_serializer=lambda m: m.SerializeToString(),  # protocol, not served
                                     response_deserializer=spb.QueryRouteResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await absent(spb.QueryRouteRequest(), timeout=5)
        assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_an_oversized_message_is_refused_and_the_connection_keeps_serving(served, stub):
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Heartbeat(heartbeat("x" * (LIMIT + 10)), timeout=5)
    assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(LIMIT) in failure.value.details()
    assert (await stub.Heartbeat(heartbeat("after"), timeout=5)).status.message == "after"


async def test_a_gzip_compressed_request_is_inflated_and_a_bomb_is_refused(served, stub):
    answer = await stub.Heartbeat(heartbeat("zipped"), compression=grpc.Compression.Gzip, timeout=5)
    assert answer.status.message == "zipped"
    async with grpc.aio.insecure_channel(served[2]) as channel:  # 1 MiB of zeros inflated past the limit
        bomb = channel.unary_unary("/apache.rocketmq.v2.MessagingService/Heartbeat",
                                   request_serializer=lambda m: m, response_deserializer=spb.HeartbeatResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await bomb(heartbeat("z" * (1 << 20)).SerializeToString(), compression=grpc.Compression.Gzip, timeout=5)
        assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_message_that_is_not_the_request_type_is_an_internal_error(served):
    async with grpc.aio.insecure_channel(served[2]) as channel:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/Heartbeat",
                                  request_serializer=lambda m: m, response_deserializer=lambda b: b)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await raw(b"\xff\xff\xff\xff", timeout=5)
        assert failure.value.code() == grpc.StatusCode.INTERNAL
        assert "HeartbeatRequest" in failure.value.details()


async def test_a_service_that_fails_answers_unknown_naming_it(served, stub):
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Heartbeat(heartbeat("crash"), timeout=5)
    assert failure.value.code() == grpc.StatusCode.UNKNOWN
    assert "Heartbeat" in failure.value.details() and "boom" in failure.value.details()


async def test_past_its_deadline_a_call_is_cancelled_on_the_server(served, stub):
    service, server, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Heartbeat(heartbeat("slow"), timeout=0.3)
    assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await wait_until(lambda: service.cancelled == ["Heartbeat"], timeout=5, what="the service's call cancelled")
    await wait_until(lambda: not server.calls, timeout=5, what="the call forgotten")


async def test_a_large_stream_respects_the_clients_window_and_a_cancel_ends_it(served, stub):
    service, server, _ = served
    request = spb.ReceiveMessageRequest(group=pb.Resource(name="hold"), batch_size=12)  # 3 MiB, 64 KiB windows
    call = stub.ReceiveMessage(request, timeout=20)
    got = []
    async for response in call:
        got.append(response.message.body)
        if len(got) == 12:
            break
    assert [b[0] for b in got] == list(range(12)) and {len(b) for b in got} == {256 * 1024}
    call.cancel()
    await wait_until(lambda: service.cancelled == ["ReceiveMessage"], timeout=5, what="the held stream cancelled")
    await wait_until(lambda: not server.calls, timeout=5, what="the call forgotten")


async def test_a_bidirectional_call_answers_each_request_and_ends_when_the_client_does(stub):
    async def commands():
        for text in ("one", "two", "three"):
            yield spb.TelemetryCommand(status=pb.Status(message=text))
    answers = [c.status.message async for c in stub.Telemetry(commands(), timeout=5)]
    assert answers == ["one", "two", "three"]


async def test_stopping_answers_a_held_call_unavailable_and_refuses_new_ones(served, stub):
    service, server, address = served
    call = stub.Heartbeat(heartbeat("slow"), timeout=10)
    await wait_until(lambda: server.calls, timeout=5, what="the call held")
    await server.stop(grace=0.2)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    assert service.cancelled == ["Heartbeat"]


# -- raw HTTP/2 -------------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def read_frames(sock: socket.socket, until_kind: int) -> list[tuple[int, int, int, bytes]]:
    """Frames until one of ``until_kind`` (or the connection closes)."""
    frames, buf = [], b""
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            frames.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]))
            buf = buf[9 + n:]
            if frames[-1][0] == until_kind:
                return frames
        data = sock.recv(65536)
        if not data:
            return frames
        buf += data


def raw(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


async def test_a_connection_that_is_not_http2_gets_goaway_protocol_error(served):
    def talk() -> list:
        with raw(served[2]) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            return read_frames(sock, 7)
    frames = await asyncio.to_thread(talk)
    goaway = [f for f in frames if f[0] == 7]
    assert goaway and int.from_bytes(goaway[0][3][4:8], "big") == 1  # PROTOCOL_ERROR
    assert b"preface" in goaway[0][3][8:]


async def test_ping_is_echoed_and_a_plain_get_is_refused_with_405(served):
    def talk() -> tuple[list, list]:
        with raw(served[2]) as sock:
            sock.sendall(PREFACE + frame(4, 0, 0) + frame(6, 0, 0, b"12345678"))
            pings = read_frames(sock, 6)
            block = Encoder().encode([(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x")])
            sock.sendall(frame(1, 0x5, 1, block))
            return pings, read_frames(sock, 1)
    pings, answer = await asyncio.to_thread(talk)
    assert (6, 1, 0, b"12345678") in pings
    headers = [f for f in answer if f[0] == 1 and f[2] == 1][0]
    assert (":status", "405") in Decoder().decode(headers[3])
    assert headers[1] & 0x1  # END_STREAM


async def test_a_header_block_that_does_not_decode_closes_with_compression_error(served):
    def talk() -> list:
        with raw(served[2]) as sock:
            sock.sendall(PREFACE + frame(4, 0, 0) + frame(1, 0x5, 1, b"\x80"))  # index 0
            return read_frames(sock, 7)
    goaway = [f for f in await asyncio.to_thread(talk) if f[0] == 7]
    assert goaway and int.from_bytes(goaway[0][3][4:8], "big") == 9  # COMPRESSION_ERROR



async def test_a_long_stream_of_small_messages_gets_its_window_back(served):
    """A client that keeps to its windows (as every gRPC client does) sends 5 MB in 300-byte
    messages on one bidirectional stream, more than the 4 MiB the server gives a stream: the
    server hands the window back as it reads, and answers every message."""
    count = 17_000
    telemetry = spb.TelemetryCommand(status=pb.Status(message="m" * 280)).SerializeToString()
    message = struct.pack(">BI", 0, len(telemetry)) + telemetry

    def talk() -> bool:
        import threading
        sock = raw(served[2])
        sock.settimeout(10)
        lock, moved = threading.Lock(), threading.Condition()
        windows = {"conn": 65_535, "stream": None}  # the server's SETTINGS give the stream's
        trailers = [False]

        def send(data: bytes) -> None:
            with lock:
                sock.sendall(data)

        def read() -> None:
            buf = b""
            try:
                while not trailers[0]:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                    while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                        n = int.from_bytes(buf[:3], "big")
                        kind, flags, sid, payload = buf[3], buf[4], int.from_bytes(buf[5:9], "big"), buf[9:9 + n]
                        buf = buf[9 + n:]
                        with moved:
                            if kind == 4 and not flags & 1:  # SETTINGS: the initial stream window
                                for i in range(0, len(payload), 6):
                                    if int.from_bytes(payload[i:i + 2], "big") == 4:
                                        windows["stream"] = int.from_bytes(payload[i + 2:i + 6], "big")
                                send(frame(4, 1, 0))
                            elif kind == 8:
                                windows["conn" if sid == 0 else "stream"] += int.from_bytes(payload, "big")
                            elif kind == 0 and payload:  # the answers: the server gets its window back
                                send(frame(8, 0, 0, struct.pack(">I", len(payload))) +
                                     frame(8, 0, sid, struct.pack(">I", len(payload))))
                            elif kind == 1 and flags & 1:
                                trailers[0] = True
                            moved.notify_all()
            except OSError:
                return

        reader = threading.Thread(target=read, daemon=True)
        block = Encoder().encode([(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                                  (":path", "/apache.rocketmq.v2.MessagingService/Telemetry"),
                                  ("content-type", "application/grpc"), ("te", "trailers")])
        sock.sendall(PREFACE + frame(4, 0, 0))
        reader.start()
        send(frame(1, 0x4, 1, block))
        for _ in range(count):
            with moved:
                if not moved.wait_for(lambda: windows["stream"] is not None and
                                      min(windows["conn"], windows["stream"]) >= len(message), timeout=5):
                    return False  # stalled: no window came back
                windows["conn"] -= len(message)
                windows["stream"] -= len(message)
            send(frame(0, 0, 1, message))
        send(frame(0, 1, 1))
        reader.join(20)
        sock.close()
        return trailers[0]

    ended = await asyncio.to_thread(talk)
    assert ended, "the stream stalled: the server did not give its window back"


async def test_a_client_that_pings_without_reading_is_stopped_by_back_pressure(served):
    """PINGs sent by a client that reads nothing: the server stops reading once its answers
    (the ACKs) fill the transport's buffer, so the client's sends block instead of the server's
    memory growing with them."""
    server = served[1]
    pings = frame(6, 0, 0, b"12345678") * (1 << 16)  # 1.1 MB a round

    def flood() -> int:
        sock = raw(served[2])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(2)
        sock.sendall(PREFACE + frame(4, 0, 0))
        sent = 0
        try:
            for _ in range(40):
                sock.sendall(pings)
                sent += len(pings)
        except (TimeoutError, OSError):
            pass
        flood.sock = sock  # closed below, once the server's buffer was looked at
        return sent

    sent = await asyncio.to_thread(flood)
    try:
        assert sent < 40 * len(pings), "the server read every PING of a client that reads nothing"
        [conn] = server.connections
        assert conn.transport.get_write_buffer_size() < 4 << 20
    finally:
        flood.sock.close()
