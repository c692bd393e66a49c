"""Three push consumers share a topic's eight queues; one is killed (SIGKILL) and its queues
move to the other two at once (the broker sees the connection drop and tells the group);
every message produced before, during and after is consumed."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from tests.consumer_support import JsonEventsProcess, create_topic, produce
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

PROC = Path(__file__).with_name("push_consumer_proc.py")
REBALANCE_INTERVAL = 20.0  # the consumers' default


class ConsumerProcess(JsonEventsProcess):
    @classmethod
    async def start(cls, namesrv: str, group: str, topic: str, *extra: str) -> "ConsumerProcess":
        return await cls.spawn(sys.executable, str(PROC), "--namesrv", namesrv, "--group", group, "--topic", topic,
                               *extra, stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def queues(self, topic: str) -> set[int] | None:
        """The latest assignment this consumer reported (None before it reported one)."""
        for e in reversed(self.events):
            if e["event"] in ("assigned", "ready"):
                return {q[2] for q in e["queues"] if q[0] == topic}
        return None

    def received_keys(self) -> set[str]:
        return {e["key"] for e in self.of("received")}

    async def stderr(self) -> str:
        return (await self.proc.stderr.read()).decode(errors="replace")


def partition(consumers: list[ConsumerProcess], topic: str, queues: int) -> bool:
    """Every queue owned by exactly one of ``consumers``."""
    shares = [c.queues(topic) for c in consumers]
    if any(s is None for s in shares):
        return False
    owned = [q for s in shares for q in s]
    return sorted(owned) == list(range(queues))


async def test_three_consumers_share_eight_queues_and_survive_a_kill(cluster):
    ns, topic, group = cluster.namesrv_addr, "ShareT", "share-group"
    await create_topic(ns, topic, 8)
    consumers = [await ConsumerProcess.start(ns, group, topic) for _ in range(3)]
    try:
        await wait_until(lambda: all(c.of("ready") for c in consumers), 60, "three consumers ready")
        await wait_until(lambda: partition(consumers, topic, 8), REBALANCE_INTERVAL, "8 queues split among 3 members")
        shares = sorted(len(c.queues(topic)) for c in consumers)
        assert shares == [2, 3, 3], shares  # AllocateMessageQueueAveragely

        sent = await produce(ns, topic, 150, prefix="before")
        victim, survivors = consumers[0], consumers[1:]
        victim.kill()
        killed_at = time.monotonic()
        moving = asyncio.create_task(produce(ns, topic, 150, prefix="during"))
        await wait_until(lambda: partition(survivors, topic, 8), REBALANCE_INTERVAL,
                         "the killed member's queues owned by the other two")
        took = time.monotonic() - killed_at
        assert took < REBALANCE_INTERVAL
        sent += await moving
        sent += await produce(ns, topic, 150, prefix="after")
        expected = {f"{p}-{i}" for p in ("before", "during", "after") for i in range(150)}
        assert len(sent) == len(expected)

        def consumed() -> set[str]:
            return set().union(*(c.received_keys() for c in consumers))

        await wait_until(lambda: consumed() >= expected, 60, "every produced message consumed")
        lost = expected - consumed()
        assert not lost, f"{len(lost)} message(s) lost: {sorted(lost)[:10]}"
        print(f"queues moved {took:.2f} s after the kill; "
              f"{sum(len(c.of('received')) for c in consumers)} deliveries for {len(expected)} messages")
    finally:
        codes = [await c.stop() for c in consumers]
    assert codes[1:] == [0, 0], [await c.stderr() for c in consumers[1:]]
