"""PullMessage and the offset calls (UpdateOffset, GetOffset, QueryOffset) of
``apache.rocketmq.v2.MessagingService`` (docs/operations.md#rocketmq-5-clients-grpc).

Apache's 5.3 proxy does not serve these four calls (they answer the gRPC status UNIMPLEMENTED);
FerryMQ serves them over its own paths: a pull goes through the broker's PULL_MESSAGE processor
(the same checks, filters and long polling as a 4.x pull consumer's), offsets are the broker's
consumer-offset table and the store's queue offsets. Outcomes travel in ``Status`` as elsewhere.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.pop.admission import MAX_BATCH
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common.message import decode_records
from ferrymq.common.validators import validate_group, validate_topic
from ferrymq.grpc.messages import incoming, timestamp_ms
from ferrymq.grpc.protocol import Code, pb, spb, status
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import PullMessageResponseHeader
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag
from ferrymq.store.asyncio_store import AsyncMessageStore

PullHandler = Callable[[RemotingCommand, Any], Awaitable[RemotingCommand]]
PULL_BATCH = 32  # a PullMessage without batch_size

# the broker's answer to PULL_MESSAGE -> v2 status code (found and not found are handled apart)
PULL_REFUSED = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.SYSTEM_ERROR: Code.BAD_REQUEST,  # a queue id the topic does not have
}


class QueueRefused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PullOffsets:
    def __init__(self, *, topics: TopicConfigManager, store: AsyncMessageStore, offsets: ConsumerOffsetManager,
                 pull: PullHandler) -> None:
        self.topics = topics
        self.store = store
        self.offsets = offsets
        self.pull_handler = pull

    # ------------------------------------------------------------------ checks

    def _queue(self, mq: pb.MessageQueue) -> tuple[str, int]:
        """The topic and queue id of ``mq``, or QueueRefused (a bad name, no such topic or queue)."""
        topic = mq.topic.name
        error = validate_topic(topic)
        if error:
            raise QueueRefused(Code.ILLEGAL_TOPIC, f"topic {topic!r} is invalid: {error}")
        tc = self.topics.get(topic)
        if tc is None:
            raise QueueRefused(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        if not 0 <= mq.id < max(tc.read_queue_nums, tc.write_queue_nums):
            raise QueueRefused(Code.BAD_REQUEST, f"topic {topic} has no queue {mq.id}")
        return topic, mq.id

    @staticmethod
    def _group(group: str) -> None:
        error = validate_group(group)
        if error:
            raise QueueRefused(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {group!r} is invalid: {error}")

    # ------------------------------------------------------------------ pull

    async def pull(self, request: spb.PullMessageRequest, peer: Any,
                   poll_ms: int) -> AsyncIterator[spb.PullMessageResponse]:
        """The responses of one PullMessage: a status, the messages found, then the offset to pull
        from next (also after MESSAGE_NOT_FOUND and ILLEGAL_OFFSET, where it is known)."""
        try:
            self._group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
        except QueueRefused as refused:
            yield spb.PullMessageResponse(status=status(refused.code, refused.message))
            return
        if request.offset < 0:
            yield spb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative"))
            return
        expression = request.filter_expression
        header = PullMessageHeader(
            consumer_group=request.group.name, topic=topic, queue_id=queue_id, queue_offset=request.offset,
            max_msg_nums=min(request.batch_size or PULL_BATCH, MAX_BATCH),
            sys_flag=PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if poll_ms > 0 else PullSysFlag(0)),
            suspend_timeout_millis=poll_ms, subscription=expression.expression or "*",
            expression_type="SQL92" if expression.type == pb.FilterType.SQL else "TAG")
        answer = await self.pull_handler(RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields()), peer)
        offsets = PullMessageResponseHeader.read(answer)
        next_offset = offsets.next_begin_offset
        if answer.code == ResponseCode.SUCCESS:
            yield spb.PullMessageResponse(status=status())
            for msg in decode_records(answer.body or b""):
                yield spb.PullMessageResponse(message=incoming(msg, topic=topic, receipt_handle="",
                                                               delivery_attempt=msg.reconsume_times + 1,
                                                               invisible_ms=0))
        elif answer.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            # nothing new, or nothing passing the filter (next_offset then skips what did not)
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        elif answer.code == ResponseCode.PULL_OFFSET_MOVED:
            # the nearest end of the queue (a remoting pull past the end of a queue starting at 0
            # is sent back to 0, RocketMQ's correction; a gRPC client is told where the queue ends)
            next_offset = offsets.min_offset if request.offset < offsets.min_offset else offsets.max_offset
            yield spb.PullMessageResponse(status=status(
                Code.ILLEGAL_OFFSET, f"offset {request.offset} is outside queue {queue_id} of {topic} "
                                     f"[{offsets.min_offset}, {offsets.max_offset}]"))
        else:
            yield spb.PullMessageResponse(status=status(PULL_REFUSED.get(answer.code, Code.INTERNAL_SERVER_ERROR),
                                                        answer.remark or "pull refused"))
            return
        if next_offset is not None:
            yield spb.PullMessageResponse(next_offset=next_offset)

    # ------------------------------------------------------------------ offsets

    def update_offset(self, request: spb.UpdateOffsetRequest) -> pb.Status:
        try:
            self._group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
        except QueueRefused as refused:
            return status(refused.code, refused.message)
        low, high = self.store.min_offset(topic, queue_id), self.store.max_offset(topic, queue_id)
        if not low <= request.offset <= high:
            return status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is outside queue {queue_id} of {topic} "
                                               f"[{low}, {high}]")
        self.offsets.commit(request.group.name, topic, queue_id, request.offset)
        return status()

    def get_offset(self, request: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
        try:
            self._group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
        except QueueRefused as refused:
            return spb.GetOffsetResponse(status=status(refused.code, refused.message))
        offset = self.offsets.query(request.group.name, topic, queue_id)
        if offset < 0:
            return spb.GetOffsetResponse(status=status(
                Code.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset in queue {queue_id} of {topic}"))
        return spb.GetOffsetResponse(status=status(), offset=offset)

    async def query_offset(self, request: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
        try:
            topic, queue_id = self._queue(request.message_queue)
        except QueueRefused as refused:
            return spb.QueryOffsetResponse(status=status(refused.code, refused.message))
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            offset = self.store.min_offset(topic, queue_id)
        elif policy == pb.QueryOffsetPolicy.END:
            offset = self.store.max_offset(topic, queue_id)
        elif policy == pb.QueryOffsetPolicy.TIMESTAMP:
            if not request.HasField("timestamp"):
                return spb.QueryOffsetResponse(status=status(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP "
                                                                               "needs a timestamp"))
            offset = await self.store.search_offset(topic, queue_id, timestamp_ms(request.timestamp))
        else:
            return spb.QueryOffsetResponse(status=status(Code.BAD_REQUEST, f"unknown query_offset_policy {policy}"))
        return spb.QueryOffsetResponse(status=status(), offset=offset)
