"""RECALL_MESSAGE (370, RocketMQ 5.3.2): recall a timer message before it fires
(docs/timers.md#recall); the checks and the marker are the recall service's."""

from __future__ import annotations

from ferrymq.broker.recall import RecallService
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import RecallMessageHeader, RecallMessageResponseHeader


class RecallProcessor:
    def __init__(self, recalls: RecallService, region: str) -> None:
        self.recalls = recalls
        self.region = region

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = RecallMessageHeader.read(req)  # a missing field: answered as a bad request
        outcome = await self.recalls.recall(header.topic, header.recall_handle, producer_group=header.producer_group,
                                            born_host=conn.remote_address)
        return req.response(outcome.code, remark=outcome.remark or None, ext_fields=RecallMessageResponseHeader.fields_of(
            msg_id=outcome.msg_id or None, region=self.region))
