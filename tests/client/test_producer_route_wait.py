"""A send with nowhere to go waits for the route until its send timeout, as a Java producer's
send does not give up before it: real name server and broker on 127.0.0.1 (docs/failover.md)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import NoRouteError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.common.message import Message
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
from testkit.ports import free_port
from tests.support import InProcessCluster


async def test_a_topic_no_broker_serves_fails_after_the_send_timeout_naming_it():
    namesrv = NameServer(NamesrvConfig(listen_port=0))
    await namesrv.start()
    try:
        async with Producer("route-wait", namesrv_addr=namesrv.address, send_timeout=1.5) as producer:
            started = time.monotonic()
            with pytest.raises(NoRouteError, match="no route for topic NeverThere"):
                await asyncio.wait_for(producer.send(Message("NeverThere", b"x")), 30)  # not hanging
            waited = time.monotonic() - started
    finally:
        await namesrv.stop()
    assert waited >= 1.4, f"failed after {waited:.2f} s, before its 1.5 s send timeout"


async def test_sends_while_the_only_broker_restarts_on_its_port_go_through_once_it_is_back(tmp_path):
    cluster = InProcessCluster(tmp_path / "store", settings={"listenPort": free_port()})
    await cluster.start()
    try:
        async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
            await admin.create_topic("Restarting", broker_addr=cluster.broker_addr, read_queues=2, write_queues=2)
        async with Producer("route-wait", namesrv_addr=cluster.namesrv_addr, send_timeout=60) as producer:
            assert (await producer.send(Message("Restarting", b"before"))).status is SendStatus.SEND_OK
            address = cluster.broker_addr
            await cluster.broker.stop()
            during = [asyncio.create_task(producer.send(Message("Restarting", f"during-{i}".encode())))
                      for i in range(10)]
            await cluster.start_broker()
            assert cluster.broker_addr == address
            results = await asyncio.gather(*during)
        assert {r.status for r in results} == {SendStatus.SEND_OK}
    finally:
        await cluster.stop()
