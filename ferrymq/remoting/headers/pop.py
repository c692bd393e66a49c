"""POP headers (RocketMQ 5's PopMessageRequestHeader, AckMessageRequestHeader,
ChangeInvisibleTimeRequestHeader and their answers; docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire


@header
class PopMessageHeader(Header):
    """POP_MESSAGE."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str = wire("topic", required=True, topic=True)
    queue_id: int = wire("queueId", INT, -1)
    max_msg_nums: int = wire("maxMsgNums", INT, required=True)
    invisible_time: int = wire("invisibleTime", LONG, required=True)
    poll_time: int = wire("pollTime", LONG, 0)
    born_time: int | None = wire("bornTime", LONG)
    init_mode: int = wire("initMode", INT, 0)
    exp_type: str | None = wire("expType")
    exp: str | None = wire("exp")
    order: bool = wire("order", BOOL, False)


@header
class AckMessageHeader(Header):
    """ACK_MESSAGE: the receipt handle travels in extraInfo."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str = wire("topic", required=True, topic=True)
    extra_info: str = wire("extraInfo", required=True)


@header
class ChangeInvisibleTimeHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME."""

    consumer_group: str = wire("consumerGroup", required=True, group="consumer")
    topic: str = wire("topic", required=True, topic=True)
    extra_info: str = wire("extraInfo", required=True)
    invisible_time: int = wire("invisibleTime", LONG, required=True)


@header
class PopMessageResponseHeader(Header):
    pop_time: int = wire("popTime", LONG, 0)
    invisible_time: int = wire("invisibleTime", LONG, 0)
    revive_qid: int = wire("reviveQid", INT, 0)
    rest_num: int = wire("restNum", LONG, 0)


@header
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: int = wire("popTime", LONG, 0)
    invisible_time: int = wire("invisibleTime", LONG, 0)
    revive_qid: int = wire("reviveQid", INT, 0)
    extra_info: str | None = wire("extraInfo")
