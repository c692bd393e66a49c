"""The console's clients, one set per cluster: the admin client for everything it reads and
manages, a producer for test messages and DLQ resends, a pull consumer for browsing queues.
The producer and pull consumer start on first use; all close with the console."""

from __future__ import annotations

import asyncio

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.protocol import TOOLS_CONSUMER_GROUP
from ferrymq.console.settings import ClusterSpec, ConsoleSettings

CONSOLE_PRODUCER_GROUP = "FERRYMQ_CONSOLE_PRODUCER"


class UnknownCluster(LookupError):
    pass


class ClusterConnection:
    def __init__(self, spec: ClusterSpec, settings: ConsoleSettings) -> None:
        self.spec = spec
        self._settings = settings
        self.admin = AdminClient(config=settings.client_config(spec.name))
        self._producer: Producer | None = None
        self._pull: PullConsumer | None = None
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.spec.name

    async def producer(self) -> Producer:
        async with self._lock:
            if self._producer is None:
                producer = Producer(CONSOLE_PRODUCER_GROUP, config=self._settings.client_config(self.name))
                await producer.start()
                self._producer = producer
            return self._producer

    async def pull_consumer(self) -> PullConsumer:
        """Reads queues without committing anything (RocketMQ's tools group, as mqadmin does)."""
        async with self._lock:
            if self._pull is None:
                pull = PullConsumer(TOOLS_CONSUMER_GROUP, config=self._settings.client_config(self.name))
                await pull.start()
                self._pull = pull
            return self._pull

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
        if self._pull is not None:
            await self._pull.close()
        await self.admin.close()


class Connections:
    def __init__(self, settings: ConsoleSettings) -> None:
        self._by_name = {spec.name: ClusterConnection(spec, settings) for spec in settings.clusters}

    def __iter__(self):
        return iter(self._by_name.values())

    def get(self, name: str) -> ClusterConnection:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownCluster(f"no cluster named {name!r} (known: {', '.join(self._by_name)})") from None

    async def close(self) -> None:
        for connection in self._by_name.values():
            await connection.close()
