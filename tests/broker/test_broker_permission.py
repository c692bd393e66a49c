"""brokerPermission, as RocketMQ: a broker made read-only (the operator's drain before a restart
or a scale-down) tells the name servers at once, with every topic's perm masked by its own, so
routes show it read-only and producers stop choosing it; restoring write permission does the same."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.common.protocol import Perm


async def route_perm(admin: AdminClient, topic: str) -> int:
    route = await admin.topic_route(topic)
    return route.queue_datas[0].perm


async def wait_for_perm(admin: AdminClient, topic: str, perm: int, timeout: float = 5.0) -> float:
    started = time.monotonic()
    while await route_perm(admin, topic) != perm:
        assert time.monotonic() - started < timeout, f"route still shows perm {await route_perm(admin, topic)}"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_read_only_broker_is_read_only_in_routes_at_once(cluster):
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.create_topic("drained", broker_addr=cluster.broker_addr, read_queues=2, write_queues=2)
        await wait_for_perm(admin, "drained", Perm.READ_WRITE)
        await admin.update_broker_config(cluster.broker_addr, {"brokerPermission": str(Perm.READ)})
        # well before the broker's own 30 s registration timer
        assert await wait_for_perm(admin, "drained", Perm.READ) < 5.0
        # the stored topic keeps its own perm: only what the routes say is masked
        assert (await admin.topic_configs(cluster.broker_addr))["drained"].perm == Perm.READ_WRITE
        async with Producer("perm-producer", namesrv_addr=cluster.namesrv_addr) as producer:
            # no writable queue anywhere: the producer does not even try the read-only broker
            with pytest.raises(MQClientError, match="no route for topic drained"):
                await producer.send(Message("drained", b"x"))
        await admin.update_broker_config(cluster.broker_addr, {"brokerPermission": str(Perm.READ_WRITE)})
        await wait_for_perm(admin, "drained", Perm.READ_WRITE)
        async with Producer("perm-producer", namesrv_addr=cluster.namesrv_addr) as producer:
            assert (await producer.send(Message("drained", b"x"))).status.name == "SEND_OK"
