"""A message's trace as the console shows it (docs/trace.md#in-the-console): the records
``ferrymq admin message trace`` reads (the admin client's ``message_trace``), arranged as the
publish, any transaction end, and per consumer group its deliveries with their result.

Which trace topic: the one asked for, else the ``msgTraceTopicName`` of the brokers that have
``traceTopicEnable`` on, else the default ``RMQ_SYS_TRACE_TOPIC`` if it exists anyway (clients
may create it). When there is none, or it holds no record of the message, the answer says so."""

from __future__ import annotations

import asyncio

from ferrymq.client.errors import MQClientError
from ferrymq.common.trace_data import DEFAULT_TRACE_TOPIC, END_TRANSACTION, PUB, consume_attempts
from ferrymq.console.connections import ClusterConnection

FOUND, NO_RECORD, NO_TRACE_TOPIC = "found", "no-record", "no-trace-topic"


async def configured_trace_topics(connection: ClusterConnection) -> list[str]:
    """``msgTraceTopicName`` of every master broker with ``traceTopicEnable=true``."""
    admin = connection.admin
    addrs = sorted((await admin.master_addrs()).values())
    configs = await asyncio.gather(*(admin.broker_config(addr) for addr in addrs))
    return sorted({c.get("msgTraceTopicName") or DEFAULT_TRACE_TOPIC for c in configs
                   if c.get("traceTopicEnable", "false").lower() == "true"})


async def message_trace(connection: ClusterConnection, msg_id: str, trace_topic: str | None = None) -> dict:
    """``msg_id``: the client message id (UNIQ_KEY) the records are keyed by, or the offset
    msgId of the message, whose client id is then read from the message itself."""
    admin = connection.admin
    msg_id = await _client_id(connection, msg_id)
    enabled = await configured_trace_topics(connection)
    topic = trace_topic or (enabled[0] if enabled else DEFAULT_TRACE_TOPIC)
    answer = {"msgId": msg_id, "traceTopic": topic, "traceTopicEnabledOn": enabled, "state": FOUND, "notice": None,
              "events": [], "publish": [], "transactions": [], "groups": [], "undecodable": []}
    if topic not in await admin.topic_list():
        answer["state"] = NO_TRACE_TOPIC
        answer["notice"] = (f"There is no trace topic {topic}." if trace_topic else
                            "Message trace is not enabled on this cluster's brokers (traceTopicEnable=false) "
                            f"and no {topic} topic exists, so no trace record is kept.")
        return answer
    trace = await admin.message_trace(msg_id, topic)
    answer["events"] = [e.to_dict() for e in trace.events]
    answer["undecodable"] = [{"offsetMsgId": o, "reason": why} for o, why in trace.undecodable]
    answer["publish"] = [e.to_dict() | {"storeTimestamp": await _store_time(connection, e)}
                         for e in trace.events if e.type == PUB]
    answer["transactions"] = [e.to_dict() for e in trace.events if e.type == END_TRANSACTION]
    groups: dict[str | None, list] = {}
    for attempt in consume_attempts(trace.events):
        groups.setdefault(attempt.group, []).append(attempt)
    answer["groups"] = [{"group": group, "deliveries": len(attempts), "lastResult": _result(attempts[-1].success),
                         "attempts": [a.to_dict() for a in attempts]} for group, attempts in groups.items()]
    if not trace.events:
        answer["state"] = NO_RECORD
        answer["notice"] = (f"No trace record of message {msg_id} in {topic}: its producer and consumers may not "
                            "have message trace on (enableMsgTrace), or their records have not arrived yet.")
    return answer


async def _client_id(connection: ClusterConnection, msg_id: str) -> str:
    try:
        return (await connection.admin.find_message(msg_id)).client_msg_id or msg_id
    except MQClientError:  # no offset msgId of a registered broker: a client id
        return msg_id


def _result(success: bool | None) -> str:
    return "unknown" if success is None else "success" if success else "failed"


async def _store_time(connection: ClusterConnection, pub) -> int | None:
    """When the broker stored the traced message (the message itself, found by its id in the
    topic its publish record names); None when it cannot be read (deleted by retention, say)."""
    if not pub.topic:
        return None
    try:
        return (await connection.admin.find_message(pub.msg_id, pub.topic)).store_timestamp
    except MQClientError:
        return None
