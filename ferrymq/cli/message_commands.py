"""``ferrymq admin message query --key K [--topic T]``, ``ferrymq admin message view --id ID``
and ``ferrymq admin message trace MSGID``.

All read through the broker's IndexFile / CommitLog (QUERY_MESSAGE, VIEW_MESSAGE_BY_ID),
as mqadmin's queryMsgByKey, queryMsgById and queryMsgTraceById do.
"""

from __future__ import annotations

import argparse
import datetime
import sys

from ferrymq.cli.output import emit_json, table
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import default_namesrv
from ferrymq.client.errors import MQClientError
from ferrymq.common.message import MessageExt, decompress_body
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.trace_data import DEFAULT_TRACE_TOPIC


def _namesrv_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default=None, help="name servers (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--json", action="store_true", help="machine-readable output, one JSON object per line")


def _time_arg(text: str) -> int:
    """Epoch milliseconds, or an ISO date/time (local time unless it says otherwise)."""
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected epoch milliseconds or an ISO date/time, got {text!r}") from None


def _body_text(m: MessageExt) -> str:
    try:
        return decompress_body(m).decode("utf-8", "replace")
    except ValueError as e:
        return f"<{e}>"


def _describe(m: MessageExt) -> dict:
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset, "msgId": m.client_msg_id,
            "offsetMsgId": m.msg_id, "tags": m.tags, "keys": " ".join(m.keys) or None,
            "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
            "bornHost": f"{m.born_host[0]}:{m.born_host[1]}", "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
            "reconsumeTimes": m.reconsume_times, "bodyCRC": m.body_crc, "storeSize": m.store_size,
            "properties": m.properties, "body": _body_text(m)}


def _ms_text(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds") if ms > 0 else "-"


async def _topics(admin: AdminClient, topic: str | None) -> list[str]:
    return [topic] if topic else await admin.topic_list()


async def _query_everywhere(admin: AdminClient, topics: list[str], key: str, *, unique_key: bool,
                            max_num: int = 64, begin_ms: int = 0, end_ms: int | None = None) -> list[MessageExt]:
    found: list[MessageExt] = []
    for topic in topics:
        try:
            found += await admin.query_messages(topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms,
                                                unique_key=unique_key)
        except MQClientError:
            if len(topics) == 1:
                raise
            # Searching every topic: one without a route (a system topic) is no error.
    return found


async def run_query(args: argparse.Namespace) -> int:
    async with AdminClient(namesrv_addr=args.namesrv or default_namesrv()) as admin:
        topics = await _topics(admin, args.topic)
        messages = await _query_everywhere(admin, topics, args.key, unique_key=args.unique_key, max_num=args.max,
                                           begin_ms=args.begin, end_ms=args.end)
    if args.json:
        for m in messages:
            emit_json(_describe(m))
        return 0 if messages else 1
    if not messages:
        where = f"topic {args.topic}" if args.topic else f"any of {len(topics)} topic(s)"
        print(f"no message with key {args.key!r} in {where}")
        return 1
    print(table(["topic", "queue", "offset", "msgId", "offsetMsgId", "keys", "tags", "stored"],
                [[m.topic, m.queue_id, m.queue_offset, m.client_msg_id, m.msg_id, " ".join(m.keys) or "-",
                  m.tags or "-", _ms_text(m.store_timestamp)] for m in messages]))
    return 0


async def run_view(args: argparse.Namespace) -> int:
    async with AdminClient(namesrv_addr=args.namesrv or default_namesrv()) as admin:
        message = await _view(admin, args.id, args.topic)
    if args.json:
        emit_json(_describe(message))
        return 0
    info = _describe(message)
    body = info.pop("body")
    properties = info.pop("properties")
    for name in ("bornTimestamp", "storeTimestamp"):
        info[name] = f"{info[name]} ({_ms_text(info[name])})"
    width = max(map(len, info))
    for name, value in info.items():
        print(f"{name.ljust(width)}  {value if value is not None else '-'}")
    print(f"{'properties'.ljust(width)}  " + ", ".join(f"{k}={v}" for k, v in sorted(properties.items())))
    print(f"{'body'.ljust(width)}  {body}")
    return 0


async def _view(admin: AdminClient, msg_id: str, topic: str | None) -> MessageExt:
    """An offset msgId names a broker and a CommitLog offset: ask that broker, if it is one
    of ours. Anything else is taken for a client message id (UNIQ_KEY) and looked up in
    the index, of ``topic`` or of every topic."""
    try:
        host, port, _ = decode_offset_msg_id(msg_id)
    except ValueError:
        host = ""
    if host:
        known = set()
        info = await admin.cluster_info()
        for broker in info.broker_addr_table.values():
            known.update(broker.broker_addrs.values())
        if f"{host}:{port}" in known or f"[{host}]:{port}" in known:
            return await admin.view_message(msg_id)
    found = await _query_everywhere(admin, await _topics(admin, topic), msg_id, unique_key=True)
    if not found:
        raise MQClientError(f"no message with id {msg_id}"
                            + ("" if topic else " (not an offset msgId of a known broker, nor a message id in any topic)"))
    return found[0]


async def run_trace(args: argparse.Namespace) -> int:
    async with AdminClient(namesrv_addr=args.namesrv or default_namesrv()) as admin:
        trace = await admin.message_trace(args.msg_id, args.trace_topic, max_num=args.max,
                                          begin_ms=args.begin, end_ms=args.end)
    for offset_msg_id, why in trace.undecodable:
        print(f"warning: trace message {offset_msg_id} in {args.trace_topic} is not a trace record: {why}",
              file=sys.stderr)
    if args.json:
        for e in trace.events:
            emit_json(e.to_dict())
        return 0 if trace.events else 1
    if not trace.events:
        print(f"no trace record of message {args.msg_id} in {args.trace_topic}")
        return 1

    def text(value: object) -> str:
        return "-" if value is None else str(value)

    def status(success: bool | None) -> str:
        return "-" if success is None else "success" if success else "failed"

    # recordedBy: "client" for a client's own record, "broker" for one a broker wrote for gRPC traffic
    print(table(["type", "time", "group", "clientHost", "costMs", "status", "topic", "tags", "keys", "recordedBy"],
                [[e.type_name, _ms_text(e.timestamp) if e.timestamp else "-", text(e.group), text(e.client_host),
                  text(e.cost_ms), status(e.success) if e.transaction_state is None else e.transaction_state,
                  text(e.topic), text(e.tags), text(e.keys), e.recorded_by or "client"] for e in trace.events]))
    return 0


def register_admin(admin: argparse._SubParsersAction) -> None:
    """Adds ``message`` to ``ferrymq admin``."""
    message = admin.add_parser("message", help="find stored messages by key or id").add_subparsers(dest="action", required=True)
    p = message.add_parser("query", help="messages indexed under a key (KEYS, or --unique-key for a message id)")
    _namesrv_args(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-t", "--topic", help="topic to search (default: every topic, slower)")
    p.add_argument("--unique-key", action="store_true", help="the key is a client message id (UNIQ_KEY)")
    p.add_argument("--begin", type=_time_arg, default=0, help="earliest store time (epoch ms or ISO), default: any")
    p.add_argument("--end", type=_time_arg, default=None, help="latest store time (epoch ms or ISO), default: any")
    p.add_argument("--max", type=int, default=64, help="at most this many per broker (default 64)")
    p.set_defaults(run=run_query)

    p = message.add_parser("view", help="one message by its offset msgId (or its client message id)")
    _namesrv_args(p)
    p.add_argument("-i", "--id", required=True, help="offset msgId (32 hex chars) or client message id (UNIQ_KEY)")
    p.add_argument("-t", "--topic", help="topic of a client message id (default: search every topic)")
    p.set_defaults(run=run_view)

    p = message.add_parser("trace", help="a message's trace records (what enableMsgTrace clients wrote), one row per event")
    _namesrv_args(p)
    p.add_argument("msg_id", metavar="MSGID", help="the client message id (UNIQ_KEY) the producer was given")
    p.add_argument("-t", "--trace-topic", default=DEFAULT_TRACE_TOPIC,
                   help=f"trace topic (default {DEFAULT_TRACE_TOPIC}; a client's customizedTraceTopic otherwise)")
    p.add_argument("--begin", type=_time_arg, default=0, help="earliest store time (epoch ms or ISO), default: any")
    p.add_argument("--end", type=_time_arg, default=None, help="latest store time (epoch ms or ISO), default: any")
    p.add_argument("--max", type=int, default=64, help="at most this many trace messages per broker (default 64)")
    p.set_defaults(run=run_trace)
