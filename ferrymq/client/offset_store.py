"""Where a push consumer keeps its consume offsets.

Clustering: the broker owns a group's offsets (:class:`RemoteBrokerOffsetStore`): the
consumer keeps the latest in memory, persists them every 5 s and at shutdown
(UPDATE_CONSUMER_OFFSET), and asks the broker (QUERY_CONSUMER_OFFSET) when it takes a queue
over. Broadcasting: every member consumes everything, so each keeps its own offsets in a
local file (:class:`LocalFileOffsetStore`, RocketMQ's ``offsets.json`` format).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from pathlib import Path
from typing import Protocol

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common.consumer_protocol import ResetOffsetBody
from ferrymq.common.protocol import MASTER_ID, MessageQueue
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import OffsetResponseHeader, QueryConsumerOffsetHeader, UpdateConsumerOffsetHeader

log = logging.getLogger(__name__)


class ReadFrom(enum.Enum):
    MEMORY = "MEMORY"
    STORE = "STORE"
    MEMORY_THEN_STORE = "MEMORY_THEN_STORE"


NOT_FOUND = -1  # the store has no offset for the queue
READ_FAILED = -2  # the store could not be asked (broker unreachable)


class OffsetStore(Protocol):
    async def load(self) -> None: ...
    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...
    async def read(self, mq: MessageQueue, source: ReadFrom) -> int: ...
    async def persist_all(self, mqs: set[MessageQueue], *, oneway: bool) -> None: ...
    async def persist(self, mq: MessageQueue) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class RemoteBrokerOffsetStore(_MemoryTable):
    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        pass

    async def read(self, mq: MessageQueue, source: ReadFrom) -> int:
        if source is not ReadFrom.STORE:
            found = self.table.get(mq)
            if found is not None or source is ReadFrom.MEMORY:
                return found if found is not None else NOT_FOUND
        try:
            offset = await self._fetch(mq)
        except MQBrokerError:
            return NOT_FOUND  # any refusal reads as "no offset stored" (Java does the same)
        except MQClientError as e:
            log.warning("reading the offset of %s for %s failed: %s", mq, self.group, e)
            return READ_FAILED
        self.update(mq, offset, increase_only=False)
        return offset

    async def _fetch(self, mq: MessageQueue) -> int:
        # Read from the master, or a slave (which copies the master's offsets) when the master
        # is not in the route; offsets are only ever written to the master (``_send``).
        addr, _ = await self.instance.find_subscribe_addr(mq.broker_name, MASTER_ID, mq.topic)
        header = QueryConsumerOffsetHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id)
        response = await self.instance.invoke_broker(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                                                                   header.to_ext_fields()))
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        return OffsetResponseHeader.offset_of(response, NOT_FOUND)

    async def _send(self, mq: MessageQueue, offset: int, *, oneway: bool) -> None:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic)
        request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset).to_ext_fields())
        if oneway:
            await self.instance.invoke_broker_oneway(addr, request)
        else:
            response = await self.instance.invoke_broker(addr, request)
            if response.code != ResponseCode.SUCCESS:
                raise MQBrokerError(response.code, response.remark)

    async def persist_all(self, mqs: set[MessageQueue], *, oneway: bool = True) -> None:
        """Send the offsets of ``mqs``; forget offsets of queues no longer owned."""
        for mq, offset in list(self.table.items()):
            if mq in mqs:
                try:
                    await self._send(mq, offset, oneway=oneway)
                except MQClientError as e:
                    log.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, e)
        for mq in [m for m in self.table if m not in mqs]:
            del self.table[mq]

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.table.get(mq)
        if offset is not None:
            try:
                await self._send(mq, offset, oneway=True)
            except MQClientError as e:
                log.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, e)


def default_offset_dir() -> Path:
    return Path(os.environ.get("FERRYMQ_OFFSET_STORE_DIR", Path.home() / ".ferrymq_offsets"))


class LocalFileOffsetStore(_MemoryTable):
    """``<dir>/<clientId>/<group>/offsets.json`` = ``{"offsetTable":{<MessageQueue>:offset}}``."""

    def __init__(self, directory: Path, client_id: str, group: str) -> None:
        super().__init__()
        self.path = Path(directory) / client_id.replace(":", "_") / group / "offsets.json"
        self._file = JsonConfigFile(self.path)

    async def load(self) -> None:
        data = await asyncio.to_thread(self._file.load)
        if data:
            self.table.update(ResetOffsetBody.from_dict(data).offset_table)

    async def read(self, mq: MessageQueue, source: ReadFrom) -> int:
        if source is not ReadFrom.STORE and mq in self.table:
            return self.table[mq]
        if source is ReadFrom.MEMORY:
            return NOT_FOUND
        data = await asyncio.to_thread(self._file.load)
        stored = ResetOffsetBody.from_dict(data).offset_table if data else {}
        if mq in stored:
            self.update(mq, stored[mq], increase_only=False)
            return stored[mq]
        return NOT_FOUND

    async def persist_all(self, mqs: set[MessageQueue], *, oneway: bool = True) -> None:
        snapshot = {mq: o for mq, o in self.table.items() if mq in mqs}
        if not snapshot:
            return
        await self._file.save(lambda: ResetOffsetBody(snapshot).to_json(indent=2).decode("utf-8"))

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(set(self.table))
