"""A stored message as the console's JSON shows it: header fields, properties, and the body
as text (when it is UTF-8) and base64 (always), so a page can show text, pretty JSON or hex."""

from __future__ import annotations

import base64

from ferrymq.common.message import MessageExt, Prop, decompress_body
from ferrymq.common.protocol import DLQ_GROUP_TOPIC_PREFIX


def trace_id_of(properties: dict) -> str | None:
    """The W3C trace id a message carries (``traceparent``, or a RocketMQ 5 client's trace
    context), or None."""
    value = properties.get("traceparent") or properties.get(Prop.TRACE_CONTEXT) or ""
    parts = value.strip().split("-")
    if len(parts) >= 4 and len(parts[1]) == 32 and all(c in "0123456789abcdef" for c in parts[1]) \
            and parts[1] != "0" * 32:
        return parts[1]
    return None


def body_of(m: MessageExt) -> bytes:
    try:
        return decompress_body(m)
    except ValueError:
        return m.body  # shown as stored (hex), not hidden


def describe(m: MessageExt, *, bodies: bool = True) -> dict:
    """``bodies=False`` (an account without body viewing): the body's size and encoding, not
    the body."""
    body = body_of(m)
    try:
        text, encoding = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = None, "binary"
    out = {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset, "msgId": m.client_msg_id,
           "offsetMsgId": m.msg_id, "tags": m.tags, "keys": m.keys, "bornTimestamp": m.born_timestamp,
           "storeTimestamp": m.store_timestamp, "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
           "storeHost": f"{m.store_host[0]}:{m.store_host[1]}", "reconsumeTimes": m.reconsume_times,
           "storeSize": m.store_size, "bodySize": len(body), "properties": dict(sorted(m.properties.items())),
           "bodyEncoding": encoding, "body": text, "bodyBase64": base64.b64encode(body).decode("ascii"),
           "traceId": trace_id_of(m.properties)}
    if not bodies:
        out.update(body=None, bodyBase64=None, bodyHidden=True)
    if m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        out["deadLetter"] = {"group": m.topic[len(DLQ_GROUP_TOPIC_PREFIX):],
                             "originalTopic": m.properties.get(Prop.RETRY_TOPIC),
                             "originalMsgId": m.properties.get(Prop.ORIGIN_MESSAGE_ID)}
    return out
