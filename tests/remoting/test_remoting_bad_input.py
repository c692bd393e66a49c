"""Garbage from one peer closes that peer's connection only, with one warning."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
from remoting_support import ECHO, assert_closed_by_peer, echo

from ferrymq.remoting import RemotingClient, RemotingCommand, RemotingServer, encode_frame

MAX_FRAME = 64 * 1024


def frame(header: bytes, serialize_type: int = 0, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


GARBAGE = [
    pytest.param(b"\x00\x00\x00\x01\x00", id="impossible-length"),
    pytest.param(b"\x80\x00\x00\x00", id="negative-length"),
    pytest.param(b"\x00\x00\x00\x08\x00\x00\x01\x00abcd", id="hdrlen-beyond-frame"),
    pytest.param(frame(b"{this is not json"), id="unparsable-json-header"),
    pytest.param(frame(b"\x00\x01", serialize_type=1), id="truncated-rocketmq-header"),
    pytest.param(b"\x7f\xff\xff\xff", id="length-far-over-max"),
    pytest.param(encode_frame(RemotingCommand(ECHO, body=b"x" * MAX_FRAME)), id="whole-frame-over-max"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http-request"),
]


@pytest.fixture
async def small_server():
    server = RemotingServer(max_frame=MAX_FRAME)
    server.register(ECHO, echo)
    await server.start()
    yield server
    await server.stop()


def remoting_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("ferrymq.remoting") and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_closes_only_that_connection(
    small_server: RemotingServer, client: RemotingClient, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{small_server.port}"
    good = await client.connection(address)
    assert (await good.invoke(RemotingCommand.request(ECHO, body=b"before"))).body == b"before"

    reader, writer = await asyncio.open_connection("127.0.0.1", small_server.port)
    bad_port = writer.get_extra_info("sockname")[1]
    try:
        writer.write(garbage)
        await assert_closed_by_peer(reader)
    finally:
        writer.close()

    assert not good.closed
    assert (await good.invoke(RemotingCommand.request(ECHO, body=b"after"))).body == b"after"
    warnings = remoting_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert f"127.0.0.1:{bad_port}" in warnings[0].getMessage()
    assert "bad frame" in warnings[0].getMessage()
    assert len(small_server.connections) == 1


async def test_good_client_keeps_working_while_several_peers_misbehave(
    small_server: RemotingServer, client: RemotingClient, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{small_server.port}"
    good = await client.connection(address)
    steady = [good.invoke_async(RemotingCommand.request(ECHO, {"n": i}), timeout=10) for i in range(200)]
    peers = [await asyncio.open_connection("127.0.0.1", small_server.port) for _ in GARBAGE]
    for (_, writer), case in zip(peers, GARBAGE):
        writer.write(case.values[0])
    for reader, writer in peers:
        await assert_closed_by_peer(reader)
        writer.close()
    responses = await asyncio.gather(*steady)
    assert [r.get_int("n") for r in responses] == list(range(200))
    assert len(remoting_warnings(caplog)) == len(GARBAGE)
    assert not good.closed
