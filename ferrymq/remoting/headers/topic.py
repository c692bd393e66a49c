"""Topic, queue-offset and message-query headers a broker answers (RocketMQ's
``protocol.header`` classes; docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire

READ_WRITE = 6  # PermName.PERM_READ | PERM_WRITE
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # QUERY_MESSAGE's flag: the key is a UNIQ_KEY


@header
class CreateTopicHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (CreateTopicRequestHeader)."""

    topic: str = wire("topic", required=True, topic=True)
    default_topic: str | None = wire("defaultTopic")
    read_queue_nums: int = wire("readQueueNums", INT, 16)
    write_queue_nums: int = wire("writeQueueNums", INT, 16)
    perm: int = wire("perm", INT, READ_WRITE)
    topic_filter_type: str = wire("topicFilterType", default="SINGLE_TAG")
    topic_sys_flag: int = wire("topicSysFlag", INT, 0)
    order: bool = wire("order", BOOL, False)


@header
class TopicHeader(Header):
    """Requests naming just a topic: DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO,
    QUERY_TOPIC_CONSUME_BY_WHO."""

    topic: str = wire("topic", required=True, topic=True)


@header
class QueueHeader(Header):
    """Requests naming one queue: GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str = wire("topic", required=True, topic=True)
    queue_id: int = wire("queueId", INT, required=True)


@header
class SearchOffsetHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP."""

    topic: str = wire("topic", required=True, topic=True)
    queue_id: int = wire("queueId", INT, required=True)
    timestamp: int = wire("timestamp", LONG, required=True)


@header
class OffsetResponseHeader(Header):
    """An answer carrying one offset: GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
    QUERY_CONSUMER_OFFSET."""

    offset: int | None = wire("offset", LONG)

    @classmethod
    def offset_of(cls, response: RemotingCommand, default: int) -> int:
        """The offset an answer carries, ``default`` when it carries none."""
        offset = cls.read(response).offset
        return default if offset is None else offset


@header
class StoreTimeResponseHeader(Header):
    """GET_EARLIEST_MSG_STORETIME's answer."""

    timestamp: int | None = wire("timestamp", LONG)


@header
class QueryConsumerOffsetHeader(Header):
    """QUERY_CONSUMER_OFFSET."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str = wire("topic", required=True, topic=True)
    queue_id: int = wire("queueId", INT, required=True)


@header
class UpdateConsumerOffsetHeader(Header):
    """UPDATE_CONSUMER_OFFSET."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str = wire("topic", required=True, topic=True)
    queue_id: int = wire("queueId", INT, required=True)
    commit_offset: int = wire("commitOffset", LONG, required=True)


@header
class QueryMessageHeader(Header):
    """QUERY_MESSAGE; ``unique_key_query`` "true": the key is a UNIQ_KEY (a client message id)."""

    topic: str = wire("topic", required=True, topic=True)
    key: str = wire("key", required=True)
    max_num: int = wire("maxNum", INT, required=True)
    begin_timestamp: int = wire("beginTimestamp", LONG, required=True)
    end_timestamp: int = wire("endTimestamp", LONG, required=True)
    unique_key_query: str | None = wire(UNIQUE_KEY_QUERY)


@header
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int = wire("indexLastUpdateTimestamp", LONG, 0)
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset", LONG, 0)


@header
class ViewMessageHeader(Header):
    """VIEW_MESSAGE_BY_ID: the message's CommitLog offset."""

    offset: int = wire("offset", LONG, required=True)


@header
class BrokerConfigResponseHeader(Header):
    """GET_BROKER_CONFIG's answer: the topic table's data version (JSON)."""

    version: str | None = wire("version")
