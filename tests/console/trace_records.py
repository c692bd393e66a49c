"""Trace records written as the RocketMQ 4.9.7 Java client writes them with ``enableMsgTrace``
(docs/trace.md#trace-records; tests/common/test_trace_data.py holds bodies it wrote): a Pub per
send, a SubBefore and a SubAfter per delivery in one trace message, each trace message keyed by
the traced message's id and keys, sent to the trace topic by an ordinary producer."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from ferrymq.client.producer import Producer, SendResult
from ferrymq.common.message import Message
from ferrymq.common.trace_data import (CONSUME_RETURN_TYPES, DEFAULT_TRACE_TOPIC, PUB, SUB_AFTER, SUB_BEFORE, TraceEvent,
                                       encode_trace_data)

REGION = "DefaultRegion"


@dataclass(frozen=True)
class Delivery:
    """One delivery to a consumer of ``group``, ``after_ms`` after the send began."""

    group: str
    after_ms: int
    retry_times: int
    success: bool
    cost_ms: int
    return_type: str = "SUCCESS"  # RocketMQ's ConsumeReturnType


async def send_traced(namesrv_addr: str, broker_addr: str, topic: str, deliveries: list[Delivery], *,
                      producer_group: str = "shop_P", key: str = "order-1", tags: str = "paid", cost_ms: int = 3,
                      extra_bodies: tuple[str, ...] = ()) -> tuple[SendResult, int]:
    """Sends one message to ``topic``, then what the clients would write to the trace topic about
    it: its Pub record (``cost_ms``) and each delivery, then ``extra_bodies`` as further trace
    messages. Returns the send's result and when the send began (epoch ms)."""
    m = Message(topic, b'{"order": 1}')
    m.keys, m.tags = [key], tags
    began = int(time.time() * 1000)
    async with Producer(producer_group, namesrv_addr=namesrv_addr) as producer:
        sent = await producer.send(m)
        bodies = [encode_trace_data([TraceEvent(
            PUB, sent.msg_id, timestamp=began, region_id=REGION, group=producer_group, topic=topic, tags=tags, keys=key,
            store_host=broker_addr, body_length=len(m.body), cost_ms=cost_ms, msg_type="Normal",
            offset_msg_id=sent.offset_msg_id, success=True)])]
        for d in deliveries:
            request_id = uuid.uuid4().hex.upper()
            bodies.append(encode_trace_data([
                TraceEvent(SUB_BEFORE, sent.msg_id, timestamp=began + d.after_ms, region_id=REGION, group=d.group,
                           request_id=request_id, retry_times=d.retry_times, keys=key),
                TraceEvent(SUB_AFTER, sent.msg_id, request_id=request_id, cost_ms=d.cost_ms, success=d.success,
                           keys=key, context_code=CONSUME_RETURN_TYPES.index(d.return_type),
                           timestamp=began + d.after_ms + d.cost_ms, group=d.group)]))
        for body in [*bodies, *extra_bodies]:
            trace = Message(DEFAULT_TRACE_TOPIC, body.encode("utf-8"))
            trace.keys = [sent.msg_id, key]
            await producer.send(trace)
    return sent, began
