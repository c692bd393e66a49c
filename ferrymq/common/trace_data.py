"""Message trace records as the official clients write them (docs/trace.md#trace-records).

With ``enableMsgTrace`` a client sends, to the trace topic, ordinary messages whose KEYS are the
traced message ids plus their user keys and whose body is one or more trace contexts: contexts
end with FIELD_SPLITOR (char 2), fields inside a context are separated by CONTENT_SPLITOR
(char 1), and the first field names the type. Field order per type:

* ``Pub``: time, region, group, topic, msgId, tags, keys, storeHost, bodyLength, costMs,
  msgType, [offsetMsgId,] success[, clientHost]
* ``SubBefore``: time, region, group, requestId, msgId, retryTimes, keys
* ``SubAfter``: requestId, msgId, costMs, success, keys[, contextCode[, time[, group]]]
* ``EndTransaction``: time, region, group, topic, msgId, tags, keys, storeHost, msgType,
  transactionId, transactionState, fromTransactionCheck

Older clients write fewer of the bracketed fields; each is read when present.
:func:`encode_trace_data` writes the full form, as the 4.9.7 and 5.x remoting clients do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"

DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # the clients' and the broker's default (msgTraceTopicName)

PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION = "Pub", "SubBefore", "SubAfter", "EndTransaction"
TRACE_TYPE_ORDER = (PUB, END_TRANSACTION, SUB_BEFORE, SUB_AFTER)  # of events at the same time
TYPE_NAMES = {PUB: "publish", SUB_BEFORE: "consume before", SUB_AFTER: "consume after",
              END_TRANSACTION: "end transaction"}
# RocketMQ's MessageType, by ordinal.
MESSAGE_TYPES = ("Normal", "Trans", "TransCommit", "Delay", "Order")
# RocketMQ's ConsumeReturnType, by ordinal: a SubAfter's context code.
CONSUME_RETURN_TYPES = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")

# A property of the trace messages the broker itself writes (for gRPC traffic, docs/trace.md#rocketmq-5-grpc-clients):
# its value is what a TraceEvent's ``recorded_by`` reads; clients' trace messages have none.
RECORDED_BY_PROPERTY = "TRACE_RECORDED_BY"
RECORDED_BY_BROKER = "broker"

_MIN_FIELDS = {PUB: 13, SUB_BEFORE: 8, SUB_AFTER: 6, END_TRANSACTION: 13}


class TraceDataError(ValueError):
    """A trace record that is not in the clients' format."""


@dataclass(frozen=True)
class TraceEvent:
    """One trace context. Fields a type does not carry are None; "null" (Java's rendering of a
    missing value) reads as None too."""

    type: str
    msg_id: str
    timestamp: int | None = None
    region_id: str | None = None
    group: str | None = None
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_length: int | None = None
    cost_ms: int | None = None
    msg_type: str | None = None
    offset_msg_id: str | None = None
    success: bool | None = None
    client_host: str | None = None
    request_id: str | None = None
    retry_times: int | None = None
    context_code: int | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None
    # not a field of the record: the RECORDED_BY_PROPERTY of the trace message that carried it
    # ("broker": written by the broker for a gRPC client), None for a client's own record
    recorded_by: str | None = None

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.type]

    def to_dict(self) -> dict:
        return {camel: getattr(self, f.name) for f in dataclasses.fields(self)
                for camel in [_camel(f.name)]} | {"typeName": self.type_name}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _text(value: str) -> str | None:
    return None if value in ("", "null") else value


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise TraceDataError(f"{what} is not a number: {value!r}") from None


def _bool(value: str, what: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise TraceDataError(f"{what} is not true/false: {value!r}")
    return value.lower() == "true"


def _msg_type(value: str) -> str:
    ordinal = _int(value, "msgType")
    if not 0 <= ordinal < len(MESSAGE_TYPES):
        raise TraceDataError(f"msgType ordinal {ordinal} is not one of RocketMQ's message types")
    return MESSAGE_TYPES[ordinal]


def _decode_context(f: list[str]) -> TraceEvent:
    kind = f[0]
    if kind not in _MIN_FIELDS:
        raise TraceDataError(f"unknown trace type {kind!r} (expected one of {', '.join(_MIN_FIELDS)})")
    if len(f) < _MIN_FIELDS[kind]:
        raise TraceDataError(f"{kind} record has {len(f)} fields, at least {_MIN_FIELDS[kind]} expected")
    if kind == PUB:
        # 13 fields: no offsetMsgId; 14: offsetMsgId; 15: clientHost too.
        offset_msg_id, success = (None, f[12]) if len(f) == 13 else (f[12], f[13])
        return TraceEvent(PUB, f[5], timestamp=_int(f[1], "timestamp"), region_id=_text(f[2]), group=_text(f[3]),
                          topic=_text(f[4]), tags=_text(f[6]), keys=_text(f[7]), store_host=_text(f[8]),
                          body_length=_int(f[9], "bodyLength"), cost_ms=_int(f[10], "costTime"),
                          msg_type=_msg_type(f[11]), offset_msg_id=_text(offset_msg_id) if offset_msg_id else None,
                          success=_bool(success, "success"), client_host=_text(f[14]) if len(f) > 14 else None)
    if kind == SUB_BEFORE:
        return TraceEvent(SUB_BEFORE, f[5], timestamp=_int(f[1], "timestamp"), region_id=_text(f[2]),
                          group=_text(f[3]), request_id=_text(f[4]), retry_times=_int(f[6], "retryTimes"),
                          keys=_text(f[7]))
    if kind == SUB_AFTER:
        return TraceEvent(SUB_AFTER, f[2], request_id=_text(f[1]), cost_ms=_int(f[3], "costTime"),
                          success=_bool(f[4], "success"), keys=_text(f[5]),
                          context_code=_int(f[6], "contextCode") if len(f) > 6 else None,
                          timestamp=_int(f[7], "timestamp") if len(f) > 7 else None,
                          group=_text(f[8]) if len(f) > 8 else None)
    return TraceEvent(END_TRANSACTION, f[5], timestamp=_int(f[1], "timestamp"), region_id=_text(f[2]),
                      group=_text(f[3]), topic=_text(f[4]), tags=_text(f[6]), keys=_text(f[7]),
                      store_host=_text(f[8]), msg_type=_msg_type(f[9]), transaction_id=_text(f[10]),
                      transaction_state=_text(f[11]), from_transaction_check=_bool(f[12], "fromTransactionCheck"))


def decode_trace_data(data: bytes | str) -> list[TraceEvent]:
    """Every context in one trace message's body; :class:`TraceDataError` names the bad one."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise TraceDataError(f"trace data is not UTF-8: {e}") from None
    events = []
    for n, context in enumerate(c for c in text.split(FIELD_SPLITOR) if c):
        try:
            events.append(_decode_context(context.split(CONTENT_SPLITOR)))
        except TraceDataError as e:
            raise TraceDataError(f"trace context #{n + 1}: {e}") from None
    return events


def _field(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _ordinal(names: tuple[str, ...], name: str | None, default: int = 0) -> int:
    return names.index(name) if name in names else default


def _encode_context(e: TraceEvent) -> list[object]:
    if e.type == PUB:
        return [PUB, e.timestamp, e.region_id, e.group, e.topic, e.msg_id, e.tags, e.keys, e.store_host,
                e.body_length or 0, e.cost_ms or 0, _ordinal(MESSAGE_TYPES, e.msg_type), e.offset_msg_id,
                bool(e.success), e.client_host]
    if e.type == SUB_BEFORE:
        return [SUB_BEFORE, e.timestamp, e.region_id, e.group, e.request_id, e.msg_id, e.retry_times or 0, e.keys]
    if e.type == SUB_AFTER:
        return [SUB_AFTER, e.request_id, e.msg_id, e.cost_ms or 0, bool(e.success), e.keys,
                e.context_code if e.context_code is not None else 0, e.timestamp, e.group]
    if e.type == END_TRANSACTION:
        return [END_TRANSACTION, e.timestamp, e.region_id, e.group, e.topic, e.msg_id, e.tags, e.keys, e.store_host,
                _ordinal(MESSAGE_TYPES, e.msg_type, 1), e.transaction_id, e.transaction_state,
                bool(e.from_transaction_check)]
    raise TraceDataError(f"unknown trace type {e.type!r}")


def encode_trace_data(events: Iterable[TraceEvent]) -> str:
    """One trace message's body for ``events``, each context in the full form the 4.9.7 and 5.x
    remoting clients write (``None`` as ``null``): what :func:`decode_trace_data` reads back."""
    return "".join(CONTENT_SPLITOR.join(map(_field, _encode_context(e))) + FIELD_SPLITOR for e in events)


def complete_consume_events(events: Iterable[TraceEvent]) -> list[TraceEvent]:
    """SubAfter records of older clients carry neither group nor time, and no consume record
    carries the topic: each is taken from the SubBefore of the same request and the Pub of the
    same message, when those are among ``events``."""
    events = list(events)
    before = {(e.request_id, e.msg_id): e for e in events if e.type == SUB_BEFORE}
    topics = {e.msg_id: e.topic for e in events if e.type == PUB and e.topic}
    done = []
    for e in events:
        if e.type in (SUB_BEFORE, SUB_AFTER):
            b = before.get((e.request_id, e.msg_id))
            e = dataclasses.replace(e, topic=e.topic or topics.get(e.msg_id),
                                    group=e.group or (b.group if b else None),
                                    timestamp=e.timestamp if e.timestamp is not None else (b.timestamp if b else None))
        done.append(e)
    return done


@dataclass(frozen=True)
class ConsumeAttempt:
    """One delivery of a message to a consumer: its SubBefore and SubAfter (same request id and
    message), either of which may be missing when the client's record never arrived."""

    group: str | None
    request_id: str | None
    client_host: str | None
    timestamp: int | None  # when the listener was called (the SubBefore's time, else the SubAfter's)
    retry_times: int | None
    cost_ms: int | None
    success: bool | None  # None: no SubAfter
    return_type: str | None  # ConsumeReturnType name, from the context code

    def to_dict(self) -> dict:
        return {_camel(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}


def consume_attempts(events: Iterable[TraceEvent]) -> list[ConsumeAttempt]:
    """The consume records of ``events`` (completed by :func:`complete_consume_events`) paired
    into deliveries, by group, then oldest first."""
    pairs: dict[tuple[str | None, str], list[TraceEvent | None]] = {}
    for e in events:
        if e.type in (SUB_BEFORE, SUB_AFTER):
            pair = pairs.setdefault((e.request_id, e.msg_id), [None, None])
            pair[0 if e.type == SUB_BEFORE else 1] = e
    attempts = []
    for (request_id, _), (before, after) in pairs.items():
        code = after.context_code if after else None
        attempts.append(ConsumeAttempt(
            group=(before or after).group, request_id=request_id,
            client_host=(before.client_host if before else None) or (after.client_host if after else None),
            timestamp=(before or after).timestamp,
            retry_times=before.retry_times if before else None, cost_ms=after.cost_ms if after else None,
            success=after.success if after else None,
            return_type=CONSUME_RETURN_TYPES[code] if code is not None and 0 <= code < len(CONSUME_RETURN_TYPES) else None))
    return sorted(attempts, key=lambda a: (a.group or "", a.timestamp or 0))
