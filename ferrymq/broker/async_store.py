"""The broker's asyncio face of the (synchronous, thread-safe) message store.

Every store call that touches the disk runs in a worker thread, never on the event loop.
Writes go through a single writer thread, so appends keep their arrival order without a
lock convoy; reads use a small pool so a cold read never delays a send. After a write the
arrival is announced on the loop to wake held pulls for that queue.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from ferrymq.common.message import MessageExt
from ferrymq.store.message_store import AppendResult, GetResult, MessageStore, PutStatus

T = TypeVar("T")

ArrivalListener = Callable[[str, int, int], None]  # topic, queue id, new max offset


class AsyncMessageStore:
    def __init__(self, store: MessageStore, *, read_threads: int = 4) -> None:
        self.store = store
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-write")
        self._readers = ThreadPoolExecutor(read_threads, thread_name_prefix="store-read")
        # fsync gets its own thread: a slow disk delays durability, never the next append.
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="store-flush")
        self.arrival_listeners: list[ArrivalListener] = []

    async def _write(self, fn: Callable[..., T], *args) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer, functools.partial(fn, *args))

    async def read(self, fn: Callable[..., T], *args, **kwargs) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, functools.partial(fn, *args, **kwargs))

    async def load(self) -> None:
        await self._write(self.store.load)

    async def put_message(self, msg: MessageExt) -> AppendResult:
        result = await self._write(self.store.put_message, msg)
        self._announce(msg.topic, msg.queue_id, result)
        return result

    async def put_messages(self, msgs: list[MessageExt]) -> AppendResult:
        result = await self._write(self.store.put_messages, msgs)
        if msgs:
            self._announce(msgs[0].topic, msgs[0].queue_id, result)
        return result

    def _announce(self, topic: str, queue_id: int, result: AppendResult) -> None:
        if result.status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
            max_offset = result.queue_offset + result.msg_num
            for listener in self.arrival_listeners:
                listener(topic, queue_id, max_offset)

    async def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                           tag_filter: Callable[[int], bool] | None = None) -> GetResult:
        return await self.read(self.store.get_messages, group, topic, queue_id, offset, max_msg_nums, tag_filter)

    async def flush_commit_log(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._flusher, self.store.flush_commit_log)

    async def flush_consume_queues(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._flusher, self.store.flush_consume_queues)

    async def shutdown(self) -> None:
        """Finish queued writes, then flush and close the files (in the writer thread)."""
        await self._write(self.store.shutdown)
        for pool in (self._writer, self._readers, self._flusher):
            pool.shutdown(wait=False)  # idle by now; joining would block the loop
