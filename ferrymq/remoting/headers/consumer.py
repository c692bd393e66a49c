"""Consumer-group, client and retry headers (RocketMQ's ``protocol.header`` classes;
docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.remoting.command import java_number
from ferrymq.remoting.errors import HeaderFieldError
from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire
from ferrymq.remoting.request_headers import MAX_RECONSUME_TIMES_VERSION


@header
class ConsumerGroupHeader(Header):
    """Requests naming a consumer group: GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST,
    NOTIFY_CONSUMER_IDS_CHANGED (broker to client)."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")


@header
class ConsumeStatsHeader(Header):
    """GET_CONSUME_STATS: one topic, or every topic the group has offsets for."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str | None = wire("topic", topic=True)


@header
class DeleteGroupHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP."""

    group_name: str = wire("groupName", required=True, group="consumer")
    remove_offset: bool = wire("removeOffset", BOOL, False)


@header
class UnregisterClientHeader(Header):
    """UNREGISTER_CLIENT."""

    client_id: str | None = wire("clientID")
    producer_group: str | None = wire("producerGroup", group="producer")
    consumer_group: str | None = wire("consumerGroup", group="consumer")


@header
class ConsumerSendMsgBackHeader(Header):
    """CONSUMER_SEND_MSG_BACK; ``max_reconsume_times`` as its text (see :meth:`max_times`)."""

    offset: int = wire("offset", LONG, required=True)
    group: str = wire("group", required=True, group="consumer")
    delay_level: int = wire("delayLevel", INT, 0)
    origin_msg_id: str | None = wire("originMsgId")
    origin_topic: str | None = wire("originTopic")
    unit_mode: bool = wire("unitMode", BOOL, False)
    max_reconsume_times: str | None = wire("maxReconsumeTimes")
    broker_name: str | None = wire("bname")

    def max_times(self, version: int) -> int | None:
        """maxReconsumeTimes, honoured only from clients new enough to send it."""
        text = self.max_reconsume_times
        if version < MAX_RECONSUME_TIMES_VERSION or not text:
            return None
        number = java_number(text, 32)
        if number is None:
            name = "maxReconsumeTimes"
            raise HeaderFieldError(name, f"the custom field <{name}> is not a valid number: {text!r}")
        return number


@header
class ResetOffsetHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin to broker) and RESET_CONSUMER_CLIENT_OFFSET
    (broker to client): timestamp -1 is the end of each queue."""

    topic: str = wire("topic", required=True, topic=True)
    group: str = wire("group", required=True, group="consumer")
    timestamp: int = wire("timestamp", LONG, required=True)
    is_force: bool = wire("isForce", BOOL, True)
