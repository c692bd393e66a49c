"""Trace records written as the RocketMQ 4.9.7 Java client writes them with ``enableMsgTrace``
(docs/trace.md#trace-records; tests/common/test_trace_data.py holds bodies it wrote): a Pub per
send, a SubBefore and a SubAfter per delivery in one trace message, each trace message keyed by
the traced message's id and keys, sent to the trace topic by an ordinary producer."""

from __future__ import annotations

import uuid

from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.common.trace_data import CONTENT_SPLITOR, CONSUME_RETURN_TYPES, FIELD_SPLITOR

REGION = "DefaultRegion"


def _context(*fields: object) -> str:
    return CONTENT_SPLITOR.join("null" if f is None else str(f).lower() if isinstance(f, bool) else str(f)
                                for f in fields) + FIELD_SPLITOR


def publish(sent, message: Message, group: str, *, at_ms: int, store_host: str, cost_ms: int = 3) -> str:
    """The Pub record of ``message`` sent by ``group`` at ``at_ms`` (``sent``: its SendResult)."""
    return _context("Pub", at_ms, REGION, group, message.topic, sent.msg_id, message.tags,
                    " ".join(message.keys), store_host, len(message.body), cost_ms, 0, sent.offset_msg_id, True)


def delivery(group: str, msg_id: str, keys: str, *, at_ms: int, retry_times: int, success: bool,
             cost_ms: int, return_type: str) -> str:
    """A SubBefore and a SubAfter of one delivery, as one trace message's body."""
    request_id = uuid.uuid4().hex.upper()
    return (_context("SubBefore", at_ms, REGION, group, request_id, msg_id, retry_times, keys)
            + _context("SubAfter", request_id, msg_id, cost_ms, success, keys, CONSUME_RETURN_TYPES.index(return_type),
                       at_ms + cost_ms, group))


async def write(namesrv_addr: str, trace_topic: str, msg_id: str, keys: list[str], *bodies: str) -> None:
    """Each body as one trace message, keyed as the clients key them."""
    async with Producer("trace-writer", namesrv_addr=namesrv_addr) as producer:
        for body in bodies:
            m = Message(trace_topic, body.encode("utf-8"))
            m.keys = [msg_id, *keys]
            await producer.send(m)
