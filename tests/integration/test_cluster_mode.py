"""Cluster mode as it runs in Kubernetes: two name servers and three brokers, each its own
process on 127.0.0.1. Topics span every broker; producers keep going when one dies; it
comes back and rejoins the route."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

QUEUES = 4


@dataclass
class Cluster:
    tmp: object
    namesrv_ports: list[int] = field(default_factory=list)
    broker_ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, FerryProcess] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return ";".join(f"127.0.0.1:{p}" for p in self.namesrv_ports)

    def start_namesrv(self, i: int) -> None:
        port = free_port()
        self.namesrv_ports.append(port)
        self.processes[f"ns{i}"] = FerryProcess(["namesrv", "--port", str(port)], "name server is ready",
                                                self.tmp / f"ns{i}-{time.time_ns()}.log").start()

    def start_broker(self, name: str) -> None:
        port = self.broker_ports.setdefault(name, free_port())
        self.processes[name] = FerryProcess(
            ["broker", "--namesrv", self.namesrv, "--broker-port", str(port), "--data-dir", str(self.tmp / name),
             "--set", f"brokerName={name}", "--set", "brokerClusterName=FerryCluster"],
            "is ready on", self.tmp / f"{name}-{time.time_ns()}.log").start()

    def stop_all(self) -> None:
        for p in self.processes.values():
            p.stop()


@pytest.fixture
def cluster3(tmp_path):
    c = Cluster(tmp_path)
    try:
        for i in range(2):
            c.start_namesrv(i)
        for name in ("broker-a", "broker-b", "broker-c"):
            c.start_broker(name)
        yield c
    finally:
        c.stop_all()


def test_topic_spans_brokers_producers_survive_a_dead_broker_and_it_rejoins(cluster3):
    brokers = sorted(cluster3.broker_ports)

    async def scenario():
        async with AdminClient(namesrv_addr=cluster3.namesrv) as admin:
            async def all_registered():
                return sorted((await admin.master_addrs("FerryCluster"))) == brokers
            await wait_until(all_registered)
            created = await admin.create_topic("Spread", read_queues=QUEUES, write_queues=QUEUES, cluster="FerryCluster")
            assert sorted(created) == sorted(f"127.0.0.1:{p}" for p in cluster3.broker_ports.values())

            # Every name server gives the full route.
            for port in cluster3.namesrv_ports:
                async with AdminClient(namesrv_addr=f"127.0.0.1:{port}") as single:
                    async def full_route():
                        try:
                            route = await single.topic_route("Spread")
                        except MQClientError:  # this name server has not heard of the topic yet
                            return None
                        return sorted(q.broker_name for q in route.queue_datas) == brokers and route
                    route = await wait_until(full_route, what=f"the full route of Spread from name server {port}")
                    assert all(q.write_queue_nums == QUEUES for q in route.queue_datas)

        acks: list[tuple[MessageQueue, int, bytes]] = []
        async with Producer("spread-producer", namesrv_addr=cluster3.namesrv) as producer:
            for i in range(6 * QUEUES * len(brokers)):
                body = f"before-{i}".encode()
                r = await producer.send(Message("Spread", body))
                acks.append((r.message_queue, r.queue_offset, body))
            used = {mq for mq, _, _ in acks}
            assert used == {MessageQueue("Spread", b, q) for b in brokers for q in range(QUEUES)}

            cluster3.processes["broker-b"].kill()  # kill -9: no unregistration, no flush
            after_kill = []
            for i in range(60):
                body = f"after-{i}".encode()
                r = await producer.send(Message("Spread", body))  # must not raise
                acks.append((r.message_queue, r.queue_offset, body))
                after_kill.append(r.message_queue.broker_name)
            # Once the failure is noticed the dead broker is avoided.
            assert after_kill[5:].count("broker-b") == 0, after_kill

            cluster3.start_broker("broker-b")
            async with AdminClient(namesrv_addr=cluster3.namesrv) as admin:
                async def rejoined():
                    route = await admin.topic_route("Spread")
                    return "broker-b" in {q.broker_name for q in route.queue_datas}
                await wait_until(rejoined)

        # Every acknowledged message is readable at its acknowledged offset, byte-identical,
        # including those on the broker that was killed and restarted.
        async with PullConsumer("spread-check", namesrv_addr=cluster3.namesrv) as consumer:
            for mq, offset, body in acks:
                result = await consumer.pull(mq, offset, max_nums=1)
                assert result.messages and result.messages[0].body == body, (mq, offset, body, result.status)

    asyncio.run(scenario())
