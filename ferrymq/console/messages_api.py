"""``/api/clusters/{cluster}/messages``: find by key, by id, by topic and time range (paged);
a message's trace; export a result set (JSON lines or CSV); resend a dead-letter message to
its group."""

from __future__ import annotations

import time

from aiohttp import web

from ferrymq.common.message import Message, Prop
from ferrymq.common.protocol import DLQ_GROUP_TOPIC_PREFIX, retry_topic
from ferrymq.console import message_export, message_search, message_trace
from ferrymq.console.access import identity
from ferrymq.console.connections import ClusterConnection, Connections
from ferrymq.console.http_errors import BadRequest, int_value, json_body, point_in_time, required_text
from ferrymq.console.message_view import body_of, describe

MAX_PAGE = 500
# Properties the brokers and clients set on the way; a resent message gets fresh ones.
_TRANSIENT = {Prop.REAL_TOPIC, Prop.REAL_QID, Prop.DELAY, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.CONSUME_START_TIME,
              Prop.WAIT, Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES}


class MessagesApi:
    def __init__(self, connections: Connections, max_export: int) -> None:
        self.connections = connections
        self.max_export = max_export

    def routes(self) -> list[web.RouteDef]:
        base = "/api/clusters/{cluster}/messages"
        return [web.get(base + "/by-key", self.find_by_key), web.get(base + "/by-id", self.find_by_id),
                web.get(base + "/by-time", self.find_by_time), web.get(base + "/trace", self.trace),
                web.get(base + "/export", self.export),
                web.post(base + "/resend-dlq", self.resend_dlq)]

    async def find_by_key(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        q = request.query
        messages = await message_search.by_key(connection, required_text(q, "topic"), required_text(q, "key"),
                                               *_optional_range(q))
        return web.json_response({"messages": [_shown(request, m) for m in messages], "total": len(messages)})

    async def find_by_id(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        message = await message_search.by_id(connection, required_text(request.query, "id"),
                                             request.query.get("topic") or None)
        return web.json_response({"messages": [_shown(request, message)], "total": 1})

    async def find_by_time(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        q = request.query
        begin, end = point_in_time(q.get("begin"), "begin"), point_in_time(q.get("end"), "end")
        page = await message_search.by_time(connection, required_text(q, "topic"), begin, end,
                                            limit=int_value(q, "limit", 50, low=1, high=MAX_PAGE),
                                            cursor=message_search.Cursor.decode(q.get("cursor")))
        # A page reads queue after queue; it is shown in store-time order.
        shown = sorted(page.messages, key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return web.json_response({"messages": [_shown(request, m) for m in shown],
                                  "next": page.next_cursor.encode() if page.next_cursor else None,
                                  "estimatedTotal": page.estimated_total})

    async def trace(self, request: web.Request) -> web.Response:
        """``?id=MSGID[&traceTopic=T]``: the trace records of the message with that client id."""
        connection = self.connections.get(request.match_info["cluster"])
        q = request.query
        return web.json_response(await message_trace.message_trace(connection, required_text(q, "id"),
                                                                   q.get("traceTopic", "").strip() or None))

    async def export(self, request: web.Request) -> web.StreamResponse:
        """The whole result set of a search (``mode`` key, id or time, with that search's
        parameters), streamed as it is read. ``X-FerryMQ-Expected`` tells how many to expect
        (an upper bound for a time range) so a page can show progress."""
        if not identity(request).view_bodies:
            raise web.HTTPForbidden(reason=f"{identity(request).user} may not read message bodies: an export holds them")
        connection = self.connections.get(request.match_info["cluster"])
        q = request.query
        fmt = q.get("format", "jsonl")
        if fmt not in message_export.FORMATS:
            raise BadRequest(f"format must be one of {', '.join(message_export.FORMATS)}, not {fmt!r}")
        mode = q.get("mode")
        if mode == "key":
            found = await message_search.by_key(connection, required_text(q, "topic"), required_text(q, "key"),
                                                *_optional_range(q))
            expected, messages = len(found), _aiter(found)
        elif mode == "id":
            found = [await message_search.by_id(connection, required_text(q, "id"), q.get("topic") or None)]
            expected, messages = 1, _aiter(found)
        elif mode == "time":
            topic = required_text(q, "topic")
            begin, end = point_in_time(q.get("begin"), "begin"), point_in_time(q.get("end"), "end")
            message_search.check_range(begin, end)
            ranges = await message_search.queue_ranges(connection, topic, begin, end)
            expected = sum(r.end - r.first for r in ranges)
            if expected > self.max_export:
                raise BadRequest(f"the range holds up to {expected} messages; one export takes at most "
                                 f"{self.max_export}: narrow the time range")
            messages = message_search.every_in_range(connection, topic, begin, end)
        else:
            raise BadRequest("mode must be key, id or time")
        name = f"ferrymq-{connection.name}-{time.strftime('%Y%m%d-%H%M%S')}.{fmt}"
        response = web.StreamResponse(headers={
            "Content-Type": f"{message_export.FORMATS[fmt]}; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{name}"', "X-FerryMQ-Expected": str(expected)})
        await response.prepare(request)
        await response.write(message_export.header(fmt).encode("utf-8"))
        async for m in messages:
            await response.write(message_export.line(fmt, describe(m)).encode("utf-8"))
        await response.write_eof()
        return response

    async def resend_dlq(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        data = await json_body(request)
        message = await connection.admin.find_message(required_text(data, "offsetMsgId"))
        result = await resend_to_group(connection, message)
        return web.json_response(result)


async def resend_to_group(connection: ClusterConnection, dead) -> dict:
    """A dead-letter message goes back to its group alone, through the group's retry topic
    (which every member subscribes to), with a fresh retry budget; its consumers see the
    original topic, and its id and keys are kept."""
    if not dead.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        raise BadRequest(f"message {dead.msg_id} is in {dead.topic}, not a dead-letter (%DLQ%) topic")
    group = dead.topic[len(DLQ_GROUP_TOPIC_PREFIX):]
    target = retry_topic(group)
    admin = connection.admin
    if target not in await admin.topic_list():
        await admin.create_topic(target, read_queues=1, write_queues=1)
    # RETRY_TOPIC (the original topic) stays: the group's consumers see the message there.
    properties = {k: v for k, v in dead.properties.items() if k not in _TRANSIENT}
    copy = Message(target, body_of(dead), flag=dead.flag, properties=properties)
    result = await (await connection.producer()).send(copy)
    return {"group": group, "topic": target, "originalTopic": properties.get(Prop.RETRY_TOPIC), **result.to_dict()}


def _shown(request: web.Request, m) -> dict:
    return describe(m, bodies=identity(request).view_bodies)


def _optional_range(q) -> tuple[int, int | None]:
    begin = point_in_time(q["begin"], "begin") if q.get("begin") else 0
    end = point_in_time(q["end"], "end") if q.get("end") else None
    return begin, end


async def _aiter(items):
    for item in items:
        yield item
