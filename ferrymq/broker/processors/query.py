"""Message and time queries: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33),
SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32) (docs/wire-format.md#offset-and-query-headers).

Bodies are raw CommitLog records, back to back, exactly as stored. QUERY_MESSAGE answers
the IndexFile's candidates (the index is hash based): clients check the keys themselves.
"""

from __future__ import annotations

from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    OffsetResponseHeader,
    QueryMessageHeader,
    QueryMessageResponseHeader,
    QueueHeader,
    SearchOffsetHeader,
    StoreTimeResponseHeader,
    ViewMessageHeader,
)
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.config import StoreConfig


class QueryProcessors:
    def __init__(self, store: AsyncMessageStore, store_config: StoreConfig) -> None:
        self.store = store
        self.store_config = store_config

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_store_time,
        }

    async def query_message(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        query = QueryMessageHeader.read(req)
        max_num = query.max_num
        if query.unique_key_query == "true":  # the key is a UNIQ_KEY (a client message id)
            max_num = self.store_config.default_query_max_num
        result = await self.store.query_message(query.topic, query.key, max_num, query.begin_timestamp,
                                                query.end_timestamp)
        header = QueryMessageResponseHeader.fields_of(index_last_update_timestamp=result.index_last_update_timestamp,
                                                      index_last_update_phyoffset=result.index_last_update_phyoffset)
        if result.records:
            return req.response(ext_fields=header, body=b"".join(result.records))
        return req.response(ResponseCode.QUERY_NOT_FOUND, remark="can not find message, maybe time range not correct",
                            ext_fields=header)

    async def view_message_by_id(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        offset = ViewMessageHeader.read(req).offset
        store = self.store
        record = await store.look_message(offset)
        if record is None:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        return req.response(body=record)

    async def search_offset_by_timestamp(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.store
        query = SearchOffsetHeader.read(req)
        offset = await store.search_offset(query.topic, query.queue_id, query.timestamp)
        return req.response(ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())

    async def get_earliest_store_time(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.store
        queue = QueueHeader.read(req)
        timestamp = await store.store_time(queue.topic, queue.queue_id, store.min_offset(queue.topic, queue.queue_id))
        return req.response(ext_fields=StoreTimeResponseHeader(timestamp=timestamp).to_ext_fields())
