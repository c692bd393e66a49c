"""``/api/clusters/{cluster}/topics``: list (with kind filters), detail (route and per-queue
offsets, timer messages waiting), create or update, delete, and send a test message."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from ferrymq.client.errors import MQClientError
from ferrymq.common.message import Message
from ferrymq.common.protocol import Perm
from ferrymq.console.connections import Connections
from ferrymq.console.http_errors import BadRequest, int_value, json_body, required_text
from ferrymq.console.topic_kinds import KINDS, topic_kind


async def cluster_and_broker_names(admin) -> set[str]:
    info = await admin.cluster_info()
    return set(info.cluster_addr_table) | set(info.broker_addr_table)


ROUTE_WAIT_SECONDS = 5.0


async def route_shows(admin, topic: str, read: int, write: int) -> bool:
    """Wait (a few seconds at most) until the name servers route ``topic`` as just set: the
    brokers tell them on their own schedule, and the page shows the route next."""
    deadline = time.monotonic() + ROUTE_WAIT_SECONDS
    while True:
        try:
            route = await admin.topic_route(topic)
            if route.queue_datas and all((q.read_queue_nums, q.write_queue_nums) == (read, write)
                                         for q in route.queue_datas):
                return True
        except MQClientError:
            pass  # not routed yet
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


async def pending_timers(admin, addrs: list[str], topic: str) -> dict:
    """Timer messages waiting for ``topic`` on its brokers (docs/timers.md#operator-views): how
    many and the first due (None: none waits). A broker without timers counts none."""
    pending, earliest = 0, None
    for addr in addrs:
        try:
            metric = (await admin.timer_metrics(addr)).timing_count.get(topic)
        except MQClientError:
            continue  # timerWheelEnable=false there
        if metric is not None and metric.count:
            pending += metric.count
            earliest = metric.earliest_due_ms if earliest is None else min(earliest, metric.earliest_due_ms)
    return {"pending": pending, "earliestDueMs": earliest}


class TopicsApi:
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    def routes(self) -> list[web.RouteDef]:
        base = "/api/clusters/{cluster}/topics"
        return [web.get(base, self.list_topics), web.post(base, self.upsert_topic),
                web.get(base + "/{topic}", self.topic_detail), web.delete(base + "/{topic}", self.delete_topic),
                web.post(base + "/{topic}/messages", self.send_test_message)]

    async def list_topics(self, request: web.Request) -> web.Response:
        kinds = request.query.getall("kind", [])
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise BadRequest(f"kind must be one of {', '.join(KINDS)}, not {', '.join(unknown)}")
        admin = self.connections.get(request.match_info["cluster"]).admin
        special = await cluster_and_broker_names(admin)
        merged: dict[str, dict] = {}
        for broker_name, addr in sorted((await admin.master_addrs()).items()):
            for name, config in (await admin.topic_configs(addr)).items():
                row = merged.setdefault(name, {"topic": name, "kind": topic_kind(name, special), "brokers": [],
                                               "readQueues": 0, "writeQueues": 0, "perm": Perm.describe(config.perm),
                                               "order": config.order})
                row["brokers"].append(broker_name)
                row["readQueues"] += config.read_queue_nums
                row["writeQueues"] += config.write_queue_nums
        # Topics a name server knows that no master serves now (their brokers are gone) still show.
        for name in await admin.topic_list():
            merged.setdefault(name, {"topic": name, "kind": topic_kind(name, special), "brokers": [], "readQueues": 0,
                                     "writeQueues": 0, "perm": "---", "order": False})
        rows = [r for _, r in sorted(merged.items()) if not kinds or r["kind"] in kinds]
        return web.json_response({"topics": rows})

    async def topic_detail(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        topic = request.match_info["topic"]
        route = await admin.topic_route(topic)
        addrs = {b.broker_name: b.master_addr() for b in route.broker_datas}
        queues = await admin.topic_stats(topic)
        timers = await pending_timers(admin, [a for a in addrs.values() if a], topic)
        return web.json_response({
            "topic": topic, "kind": topic_kind(topic, await cluster_and_broker_names(admin)),
            "route": [{"brokerName": q.broker_name, "address": addrs.get(q.broker_name), "readQueues": q.read_queue_nums,
                       "writeQueues": q.write_queue_nums, "perm": Perm.describe(q.perm)} for q in route.queue_datas],
            "queues": queues,
            "messages": sum(max(0, q["maxOffset"] - q["minOffset"]) for q in queues),
            "timers": timers})

    async def upsert_topic(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        data = await json_body(request)
        topic = required_text(data, "topic")
        queues = int_value(data, "queues", 8, low=1, high=1024)
        read = int_value(data, "readQueues", queues, low=1, high=1024)
        write = int_value(data, "writeQueues", queues, low=1, high=1024)
        perm = int_value(data, "perm", Perm.READ_WRITE, low=0, high=7)
        order = data.get("order", False)
        if not isinstance(order, bool):
            raise BadRequest("order must be true or false")
        brokers = await admin.create_topic(topic, read_queues=read, write_queues=write, perm=perm, order=order)
        routed = await route_shows(admin, topic, read, write)
        return web.json_response({"topic": topic, "brokers": brokers, "readQueues": read, "writeQueues": write,
                                  "perm": Perm.describe(perm), "routed": routed})

    async def delete_topic(self, request: web.Request) -> web.Response:
        admin = self.connections.get(request.match_info["cluster"]).admin
        topic = request.match_info["topic"]
        if topic not in await admin.topic_list():
            raise MQClientError(f"topic {topic} does not exist")
        await admin.delete_topic(topic)
        return web.json_response({"topic": topic, "deleted": True})

    async def send_test_message(self, request: web.Request) -> web.Response:
        connection = self.connections.get(request.match_info["cluster"])
        data = await json_body(request)
        body = data.get("body")
        if not isinstance(body, str) or not body:
            raise BadRequest("body is required (text)")
        topic = request.match_info["topic"]
        await connection.admin.topic_route(topic)  # no test message creates a topic by accident
        message = Message(topic, body.encode("utf-8"))
        for name in ("tags", "keys"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise BadRequest(f"{name} must be text")
        if data.get("tags"):
            message.tags = data["tags"].strip()
        if data.get("keys"):
            message.keys = data["keys"].split()
        properties = data.get("properties") or {}
        if not isinstance(properties, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise BadRequest("properties must be an object of text values")
        message.properties.update(properties)
        result = await (await connection.producer()).send(message)
        return web.json_response(result.to_dict())
