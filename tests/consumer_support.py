"""Helpers for consumer-group tests: waiting on conditions, recording listeners, producing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer, SendResult
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message, MessageExt


@dataclass
class Received:
    key: str
    topic: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    at: float  # time.monotonic() when the listener saw it
    consumer: str
    msg: MessageExt


@dataclass
class Recorder:
    """A listener factory that records every delivery (thread-safe: sync listeners run in threads)."""

    events: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listener(self, name: str, fail: Callable[[MessageExt], bool] | None = None, result_on_fail=None):
        def listen(msgs: list[MessageExt], context):
            now = time.monotonic()
            with self._lock:
                for m in msgs:
                    self.events.append(Received(m.keys[0] if m.keys else m.client_msg_id, m.topic, m.queue_id,
                                                m.queue_offset, m.reconsume_times, now, name, m))
            if fail is not None and any(fail(m) for m in msgs):
                return result_on_fail
            return None

        return listen

    def keys(self) -> set[str]:
        with self._lock:
            return {e.key for e in self.events}

    def of(self, key: str) -> list[Received]:
        with self._lock:
            return [e for e in self.events if e.key == key]


async def create_topic(namesrv: str, topic: str, queues: int = 8, *, order: bool = False) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, read_queues=queues, write_queues=queues, order=order)


async def produce(namesrv: str, topic: str, count: int, *, prefix: str = "k", tags: str | None = None,
                  delay_level: int = 0, body_size: int = 16, queue=None) -> list[SendResult]:
    results = []
    async with Producer(f"{topic}-producer", namesrv_addr=namesrv) as producer:
        for i in range(count):
            m = Message(topic, f"{prefix}-{i}:".encode() + b"x" * body_size)
            m.keys = [f"{prefix}-{i}"]
            if tags:
                m.tags = tags
            if delay_level:
                m.delay_level = delay_level
            results.append(await producer.send(m, queue=queue) if queue else await producer.send(m))
    return results


class JsonEventsProcess:
    """A child process (a consumer under test) that prints one JSON event per line and
    stops cleanly when its standard input closes; its events are collected as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, *cmd: str, **kwargs) -> "JsonEventsProcess":
        proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, **kwargs)
        return cls(proc)

    async def _read(self) -> None:
        async for line in self.proc.stdout:
            if line.startswith(b"{"):
                self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]

    def kill(self) -> None:
        self.proc.kill()

    async def stop(self, timeout: float = 60.0) -> int:
        if self.proc.returncode is None:
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await self.reader
        return self.proc.returncode


async def read_all(namesrv: str, topic: str, group: str = "inspector") -> list:
    """Every message a consumer of ``topic`` can read now, from the start of each queue."""
    async with PullConsumer(group, namesrv_addr=namesrv) as pc:
        out = []
        for mq in await pc.fetch_queues(topic):
            offset = 0
            while (r := await pc.pull(mq, offset, max_nums=32)).status is PullStatus.FOUND:
                out += r.messages
                offset = r.next_begin_offset
        return out


@contextlib.asynccontextmanager
async def cluster_with_topic(data_dir, topic: str, queues: int, settings: dict | None = None):
    """An in-process name server and broker (``settings`` as broker.conf keys) with ``topic``."""
    from tests.support import InProcessCluster

    cluster = InProcessCluster(data_dir, settings=settings or {})
    await cluster.start()
    try:
        await create_topic(cluster.namesrv_addr, topic, queues)
        yield cluster
    finally:
        await cluster.stop()
