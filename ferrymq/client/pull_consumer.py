"""PullConsumer: read a queue from an offset you choose, and commit offsets for a group.

The building block under the push consumer, the CLI's ``consume`` and the Spark source.
Pulls carry their subscription expression (the SUBSCRIPTION pull flag), so no heartbeat
registration is needed; with ``suspend`` the broker holds the pull until a message comes.
"""

from __future__ import annotations

from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.pull_service import PullResult, PullService, PullStatus
from ferrymq.common.consumer_protocol import subscription_of
from ferrymq.common.protocol import MASTER_ID, MessageQueue
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    Header,
    OffsetResponseHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UpdateConsumerOffsetHeader,
)
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag

__all__ = ["PullConsumer", "PullResult", "PullStatus"]  # PullResult and PullStatus: pull_service.py


class PullConsumer:
    def __init__(self, group: str, *, namesrv_addr: str | None = None, config: ClientConfig | None = None) -> None:
        self.group = group
        self.config = config or ClientConfig()
        if namesrv_addr:
            self.config.namesrv_addr = namesrv_addr
        self.instance = ClientInstance(self.config)
        self._pulls = PullService(self.instance, self.config.serialize_type)

    async def start(self) -> "PullConsumer":
        await self.instance.start()
        return self

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> "PullConsumer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise MQClientError(f"topic {topic} does not exist")
        return route.subscribe_queues(topic)

    async def _broker(self, mq: MessageQueue) -> str:
        return await self.instance.find_broker_addr(mq.broker_name, mq.topic)

    async def _reader(self, mq: MessageQueue) -> str:
        """A broker that can answer a read about ``mq``: the group's master, or one of its slaves
        while the master is missing from the route (a slave's queues are copies of the master's)."""
        found = self.instance.find_broker_in_subscribe(mq.broker_name, MASTER_ID)
        if found is None:
            await self.instance.fetch_route(mq.topic)
            found = self.instance.find_broker_in_subscribe(mq.broker_name, MASTER_ID)
        if found is None:
            raise MQClientError(f"broker {mq.broker_name} is not in any known route")
        return found[0]

    async def pull(self, mq: MessageQueue, offset: int, *, expression: str = "*", max_nums: int = 32,
                   suspend: float = 0.0, commit_offset: int | None = None, sql: str | None = None,
                   raw: bool = False) -> PullResult:
        """Pull up to ``max_nums`` messages from ``offset``; hold up to ``suspend`` seconds if none.
        ``sql``: a SQL92 selector on message properties instead of the tag ``expression``.
        ``raw``: the result carries the records' bytes (``body``) instead of messages; only for
        subscriptions the broker filters completely (``*`` or SQL92), as tags are re-checked here."""
        try:
            sub = subscription_of(mq.topic, expression, sql)
        except ValueError as e:
            raise MQClientError(f"subscription to {mq.topic}: {e}") from None
        flags = PullSysFlag.SUBSCRIPTION
        if suspend > 0:
            flags |= PullSysFlag.SUSPEND
        if commit_offset is not None:
            flags |= PullSysFlag.COMMIT_OFFSET
        header = PullMessageHeader(self.group, mq.topic, mq.queue_id, offset, max_nums, flags,
                                   commit_offset if commit_offset is not None else 0, int(suspend * 1000),
                                   subscription=sub.sub_string, expression_type=sub.expression_type)
        if raw and sub.tags_set:
            raise MQClientError("a raw pull needs expression '*' or a SQL92 selector: tag filters are finished by the client")
        return await self._pulls.pull(mq, header, sub, self.config.api_timeout + suspend, raw=raw)

    # ------------------------------------------------------------------ offsets

    async def _offset_call(self, code: int, mq: MessageQueue, header: Header, *, read: bool = True) -> RemotingCommand:
        """A queue-offset request: reads go to the master or, without one, a slave; writes
        (``read=False``) only ever to the master."""
        addr = await self._reader(mq) if read else await self._broker(mq)
        return await self.instance.invoke_broker(addr, RemotingCommand.request(code, header.to_ext_fields()))

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` (the next offset to consume) as the group's position in ``mq``."""
        header = UpdateConsumerOffsetHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                                            commit_offset=offset)
        response = await self._offset_call(RequestCode.UPDATE_CONSUMER_OFFSET, mq, header, read=False)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)

    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset for ``mq``, or -1 when it has none."""
        header = QueryConsumerOffsetHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id)
        response = await self._offset_call(RequestCode.QUERY_CONSUMER_OFFSET, mq, header)
        return OffsetResponseHeader.offset_of(response, -1) if response.code == ResponseCode.SUCCESS else -1

    async def _offset_answer(self, code: int, mq: MessageQueue, header: Header) -> int:
        response = await self._offset_call(code, mq, header)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        return OffsetResponseHeader.offset_of(response, 0)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._offset_answer(RequestCode.GET_MAX_OFFSET, mq, QueueHeader(topic=mq.topic, queue_id=mq.queue_id))

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_answer(RequestCode.GET_MIN_OFFSET, mq, QueueHeader(topic=mq.topic, queue_id=mq.queue_id))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        header = SearchOffsetHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms)
        return await self._offset_answer(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, header)
