"""Send limits: maxMessageSize and properties over 32767 bytes answer MESSAGE_ILLEGAL (13),
invalid topic names are refused, and nothing of a refused message is stored."""

from __future__ import annotations

import time

import pytest

from ferrymq.common.message import encode_properties
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration


def send(topic: str, body: bytes, properties: dict[str, str] | None = None) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "p", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
        "i": encode_properties(properties or {}) or None, "j": 0, "k": False, "m": False}, body)


async def test_limits(tmp_path):
    c = await InProcessCluster(tmp_path / "store", settings={"maxMessageSize": 4096}).start()
    client = RemotingClient()
    try:
        store = c.broker.store
        ok = await client.invoke(c.broker_addr, send("Limits", b"x" * 4096))
        assert ok.code == ResponseCode.SUCCESS
        end = store.max_phy_offset

        too_big = await client.invoke(c.broker_addr, send("Limits", b"x" * 4097))
        assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize 4096" in too_big.remark

        long_props = await client.invoke(c.broker_addr, send("Limits", b"x", {"big": "v" * 32767}))
        assert long_props.code == ResponseCode.MESSAGE_ILLEGAL and "32767" in long_props.remark
        fits = await client.invoke(c.broker_addr, send("Limits", b"x", {"big": "v" * 32000}))
        assert fits.code == ResponseCode.SUCCESS

        for bad in ("has space", "x" * 128, "semi;colon", "ünïcode"):
            refused = await client.invoke(c.broker_addr, send(bad, b"x"))
            assert refused.code == ResponseCode.SYSTEM_ERROR, bad
            assert "topic" in refused.remark and ("illegal characters" in refused.remark or "longer" in refused.remark)
        assert store.max_phy_offset > end  # only the message that fit was stored after the first
        assert store.max_offset("Limits", 0) == 2
        assert not any(t.startswith(("has", "x" * 10, "semi")) for t in store.topic_queue_ids())
    finally:
        await client.close()
        await c.stop()
