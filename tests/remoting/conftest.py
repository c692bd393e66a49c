"""Fixtures for the remoting tests: a live server on 127.0.0.1 and a client."""

from __future__ import annotations

import pytest
from remoting_support import ECHO, echo

from ferrymq.remoting import RemotingClient, RemotingServer


@pytest.fixture
async def server():
    srv = RemotingServer("127.0.0.1", 0, name="test")
    srv.register(ECHO, echo)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def client():
    cli = RemotingClient()
    yield cli
    await cli.close()


@pytest.fixture
def address(server: RemotingServer) -> str:
    return f"127.0.0.1:{server.port}"
