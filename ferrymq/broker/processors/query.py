"""Message and time queries: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33),
SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32) (docs/wire-format.md#offset-and-query-headers).

Bodies are raw CommitLog records, back to back, exactly as stored. QUERY_MESSAGE answers
the IndexFile's candidates (the index is hash based): clients check the keys themselves.
"""

from __future__ import annotations

from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.store.async_store import AsyncMessageStore
from ferrymq.store.config import StoreConfig

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # extField: the key is a UNIQ_KEY (a client message id)


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
        topic = req.get_str("topic", required=True)
        key = req.get_str("key", required=True)
        max_num = req.get_int("maxNum", required=True)
        begin = req.get_long("beginTimestamp", required=True)
        end = req.get_long("endTimestamp", required=True)
        if req.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = self.store_config.default_query_max_num
        result = await self.store.query_message(topic, key, max_num, begin, end)
        header = {"indexLastUpdateTimestamp": result.index_last_update_timestamp,
                  "indexLastUpdatePhyoffset": result.index_last_update_phyoffset}
        if result.records:
            return req.response(ext_fields=header, body=b"".join(result.records))
        return req.response(ResponseCode.QUERY_NOT_FOUND, remark="can not find message, maybe time range not correct",
                            ext_fields=header)

    async def view_message_by_id(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        offset = req.get_long("offset", required=True)
        store = self.store
        record = await store.look_message(offset)
        if record is None:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        return req.response(body=record)

    async def search_offset_by_timestamp(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.store
        offset = await store.search_offset(req.get_str("topic", required=True), req.get_int("queueId", required=True),
                                           req.get_long("timestamp", required=True))
        return req.response(ext_fields={"offset": offset})

    async def get_earliest_store_time(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.store
        topic, queue_id = req.get_str("topic", required=True), req.get_int("queueId", required=True)
        timestamp = await store.store_time(topic, queue_id, store.min_offset(topic, queue_id))
        return req.response(ext_fields={"timestamp": timestamp})
