"""``/api/clusters/{cluster}/groups``: consumer groups with their lag and online clients,
re-enabling a group protection disabled, and offset resets with a preview of what moves."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.common.protocol import MessageQueue
from ferrymq.console.connections import ClusterConnection, Connections
from ferrymq.console.http_errors import BadRequest, json_body, point_in_time, required_text
from ferrymq.console.topic_kinds import group_is_system

PARALLEL_CALLS = 8  # per request, towards the brokers


def reset_point(text) -> int | None:
    """``earliest`` -> 0, ``latest`` -> None (the end), else a point in time (epoch ms or ISO)."""
    if text == "earliest":
        return 0
    if text == "latest":
        return None
    return point_in_time(text, "to")


def progress_rows(stats) -> list[dict]:
    return [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "brokerOffset": w.broker_offset,
             "consumerOffset": w.consumer_offset, "lag": w.lag, "lastTimestamp": w.last_timestamp}
            for mq, w in stats.offset_table.items()]


PROTOCOLS = ("remoting", "gRPC v2", "POP")  # 4.x clients, RocketMQ 5 clients, remoting POP receivers


def protocol_of(c) -> str:
    return c.protocol or "remoting"  # a broker that names no protocol knows 4.x clients only


def clients_of(online) -> list[dict]:
    """The group's online clients, 4.x and 5.x: protocol, the client's own version string when
    it sent one (5.x clients: "5.0.7"), and its subscriptions when known per client."""
    if online is None:
        return []
    return [{"clientId": c.client_id, "address": c.client_addr, "protocol": protocol_of(c), "language": c.language,
             "version": c.client_version or (str(c.version) if c.version else "–"),
             "subscriptions": c.subscriptions or {}}
            for c in sorted(online.connection_set, key=lambda c: (PROTOCOLS.index(protocol_of(c))
                                                                  if protocol_of(c) in PROTOCOLS else 9, c.client_id))]


def clients_by_protocol(online) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in online.connection_set if online else []:
        counts[protocol_of(c)] = counts.get(protocol_of(c), 0) + 1
    return counts


class GroupsApi:
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    def routes(self) -> list[web.RouteDef]:
        base = "/api/clusters/{cluster}/groups"
        return [web.get(base, self.list_groups), web.get(base + "/{group}", self.group_detail),
                web.post(base + "/{group}/consume", self.set_consume),
                web.get(base + "/{group}/reset-preview", self.reset_preview),
                web.post(base + "/{group}/reset", self.reset)]

    async def list_groups(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        include_system = request.query.get("system") in ("1", "true")
        groups = {g: by_broker for g, by_broker in (await admin.list_groups()).items()
                  if include_system or not group_is_system(g)}
        limit = asyncio.Semaphore(PARALLEL_CALLS)

        async def summary(group: str, by_broker: dict) -> dict:
            row = {"group": group, "brokers": sorted(by_broker),
                   "consumeEnable": all(c.consume_enable for c in by_broker.values()),
                   "retryMaxTimes": max(c.retry_max_times for c in by_broker.values()), "system": group_is_system(group),
                   "totalLag": None, "consumeTps": None, "topics": [], "clients": None, "clientsByProtocol": {}}
            try:
                async with limit:
                    stats = await admin.consume_stats(group)
                    online = await admin.consumer_connections(group)
            except MQClientError as e:  # one group's trouble does not hide the others
                return {**row, "error": str(e)}
            return {**row, "totalLag": stats.total_lag(), "consumeTps": stats.consume_tps,
                    "topics": sorted({mq.topic for mq in stats.offset_table}),
                    "clients": len(online.connection_set) if online else 0,
                    "clientsByProtocol": clients_by_protocol(online)}

        rows = await asyncio.gather(*(summary(g, b) for g, b in groups.items()))
        return web.json_response({"groups": list(rows)})

    async def group_detail(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        group = request.match_info["group"]
        configs = {b: c for b, c in (await admin.list_groups()).get(group, {}).items()}
        stats = await admin.consume_stats(group)
        if not configs and not stats.offset_table:
            raise BadRequest(f"group {group} does not exist (no broker has it and it has no offsets)")
        online = await admin.consumer_connections(group)
        subscriptions = sorted(({"topic": t, "expression": s.sub_string, "type": s.expression_type}
                                for t, s in (online.subscription_table if online else {}).items()),
                               key=lambda s: s["topic"])
        return web.json_response({
            "group": group, "consumeEnable": stats.consume_enable if stats.consume_enable is not None
            else all(c.consume_enable for c in configs.values()),
            "brokers": {b: c.to_dict() for b, c in sorted(configs.items())},
            "totalLag": stats.total_lag(), "consumeTps": stats.consume_tps, "queues": progress_rows(stats),
            "clients": clients_of(online), "clientsByProtocol": clients_by_protocol(online),
            "subscriptions": subscriptions,
            "messageModel": online.message_model if online else None,
            "consumeType": online.consume_type if online else None})

    async def set_consume(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        data = await json_body(request)
        enable = data.get("enable")
        if not isinstance(enable, bool):
            raise BadRequest("enable must be true or false")
        group = request.match_info["group"]
        brokers = await admin.set_group_consume_enable(group, enable)
        return web.json_response({"group": group, "consumeEnable": enable, "brokers": brokers})

    async def reset_preview(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        topic = required_text(request.query, "topic")
        point = reset_point(required_text(request.query, "to"))
        rows = await preview_reset(connection, request.match_info["group"], topic, point)
        return web.json_response({"group": request.match_info["group"], "topic": topic, "queues": rows,
                                  "moving": sum(1 for r in rows if r["delta"] != 0),
                                  "toConsume": sum(r["toConsume"] for r in rows)})

    async def reset(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        data = await json_body(request)
        topic = required_text(data, "topic")
        point = reset_point(required_text(data, "to"))
        group = request.match_info["group"]
        before = await current_offsets(admin, group, topic)
        moved = await admin.reset_offset(group, topic, timestamp=point)
        rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "before": before.get(mq),
                 "offset": offset} for mq, offset in moved.items()]
        return web.json_response({"group": group, "topic": topic, "queues": rows})


async def current_offsets(admin: AdminClient, group: str, topic: str) -> dict[MessageQueue, int]:
    stats = await admin.consume_stats(group, topic=topic)
    return {mq: w.consumer_offset for mq, w in stats.offset_table.items() if mq.topic == topic}


async def preview_reset(connection: ClusterConnection, group: str, topic: str, point: int | None) -> list[dict]:
    """Where each queue of ``topic`` would go, worked out as the broker will: the end for
    ``latest``, else the offset the broker's time search finds."""
    admin = connection.admin
    queues = await admin.topic_stats(topic)
    before = await current_offsets(admin, group, topic)
    pull = await connection.pull_consumer() if point is not None else None
    rows = []
    for q in queues:
        mq = MessageQueue(topic, q["brokerName"], q["queueId"])
        target = q["maxOffset"] if point is None else max(0, await pull.search_offset(mq, point))
        current = before.get(mq)
        rows.append({"brokerName": q["brokerName"], "queueId": q["queueId"], "current": current, "target": target,
                     "delta": target - (current if current is not None and current >= 0 else 0),
                     "toConsume": max(0, q["maxOffset"] - target)})
    return rows
