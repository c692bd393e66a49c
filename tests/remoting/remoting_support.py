"""Helpers shared by the remoting tests (a uniquely named module: `conftest` is ambiguous
when several test folders have one)."""

from __future__ import annotations

import asyncio

from ferrymq.remoting import Connection, FrameDecoder, RemotingCommand

ECHO = 9001  # test-only request code: answers with the request's body and "n" field


async def echo(request: RemotingCommand, connection: Connection) -> RemotingCommand:
    return request.response(ext_fields={"n": request.get_str("n")}, body=request.body)


async def read_commands(reader: asyncio.StreamReader, count: int, timeout: float = 5.0) -> list[RemotingCommand]:
    """Read `count` frames from a raw socket."""
    decoder = FrameDecoder()
    commands: list[RemotingCommand] = []
    async with asyncio.timeout(timeout):
        while len(commands) < count:
            data = await reader.read(65536)
            if not data:
                raise EOFError(f"peer closed after {len(commands)} frames")
            commands += decoder.feed(data)
    return commands


async def assert_closed_by_peer(reader: asyncio.StreamReader, timeout: float = 5.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except ConnectionResetError:
        pass
