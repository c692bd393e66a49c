"""Consumer offsets and queue offsets: codes 14, 15, 30, 31, 43 (29 and 32 are in query.py)."""

from __future__ import annotations

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    UpdateConsumerOffsetHeader,
)
from ferrymq.store.asyncio_store import AsyncMessageStore

class OffsetProcessors:
    def __init__(self, store: AsyncMessageStore, offsets: ConsumerOffsetManager) -> None:
        self.store = store
        self.offsets = offsets

    async def query_consumer_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        query = QueryConsumerOffsetHeader.read(req)
        topic, queue_id = query.topic, query.queue_id
        offset = self.offsets.query(query.consumer_group, topic, queue_id)
        if offset >= 0:
            return _offset_answer(req, offset)
        # A group new to a queue whose first message is still hot starts from 0 (RocketMQ
        # does this so a fresh consumer does not skip a young topic's first messages).
        store = self.store
        if store.min_offset(topic, queue_id) <= 0:
            first_phys = await store.commit_log_offset(topic, queue_id, 0)
            if first_phys >= 0 and store.is_in_memory(first_phys):
                return _offset_answer(req, 0)
        return req.response(ResponseCode.QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    async def update_consumer_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        update = UpdateConsumerOffsetHeader.read(req)
        self.offsets.commit(update.consumer_group, update.topic, update.queue_id, update.commit_offset)
        return req.response()

    async def get_max_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        queue = QueueHeader.read(req)
        return _offset_answer(req, self.store.max_offset(queue.topic, queue.queue_id))

    async def get_min_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        queue = QueueHeader.read(req)
        return _offset_answer(req, self.store.min_offset(queue.topic, queue.queue_id))

    async def get_all_consumer_offset(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET: the whole offset table (what a slave copies from its master)."""
        return req.response(body=self.offsets.render().encode())


def _offset_answer(req: RemotingCommand, offset: int) -> RemotingCommand:
    return req.response(ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())
