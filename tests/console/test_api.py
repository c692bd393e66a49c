"""The console's JSON API without a browser, against a real name server and broker: what a
script gets from /api/..., and the clear errors (400 bad input, 403 read-only, 404 unknown)
it gets when a request cannot be served."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message, decode_records
from ferrymq.common.protocol import MessageQueue
from ferrymq.console.server import ConsoleServer
from ferrymq.console.settings import ClusterSpec, ConsoleSettings
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.console import trace_records
from tests.console.trace_records import Delivery
from tests.consumer_support import produce
from tests.support import InProcessCluster
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


class Api:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.base = session, base

    async def call(self, method: str, path: str, body=None, *, status: int = 200, raw: str | None = None):
        kwargs = {"data": raw} if raw is not None else ({"json": body} if body is not None else {})
        async with self.session.request(method, self.base + path, **kwargs) as response:
            data = await response.json()
            assert response.status == status, (response.status, data)
            if status >= 400:
                assert set(data) == {"error"} and data["error"], data
            return data

    async def get(self, path: str, **kw):
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body=None, **kw):
        return await self.call("POST", path, body if body is not None else {}, **kw)


async def _console(cluster, **settings):
    server = ConsoleServer(ConsoleSettings([ClusterSpec("local", cluster.namesrv_addr)], host="127.0.0.1", port=0,
                                           **{"read_only": False, "sample_seconds": 60, **settings}))
    await server.start()
    return server


@pytest.fixture
async def api(cluster):
    server = await _console(cluster)
    async with aiohttp.ClientSession() as session:
        yield Api(session, server.url + "/api")
    await server.stop()


@pytest.fixture
async def admin(cluster):
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as client:
        yield client


async def _routed(admin, topic: str) -> bool:
    try:
        return bool((await admin.topic_route(topic)).queue_datas)
    except Exception:  # noqa: BLE001 - not registered with the name server yet
        return False


async def _topic_with_messages(cluster, admin, topic: str, count: int, queues: int = 2) -> None:
    await admin.create_topic(topic, read_queues=queues, write_queues=queues)
    await wait_until(lambda: _routed(admin, topic), 10, f"a route for {topic}")
    await produce(cluster.namesrv_addr, topic, count, prefix=topic.lower())


async def test_config_and_unknown_things_answer_json(api):
    config = await api.get("/config")
    assert config["readOnly"] is False and [c["name"] for c in config["clusters"]] == ["local"]
    error = await api.get("/clusters/elsewhere/topics", status=404)
    assert "elsewhere" in error["error"] and "local" in error["error"]
    await api.get("/no/such/thing", status=404)


async def test_topics_list_by_kind_create_detail_and_delete(api, admin, cluster):
    created = await api.post("/clusters/local/topics", {"topic": "ApiTopic", "readQueues": 3, "writeQueues": 3})
    assert created["routed"] is True and created["readQueues"] == 3
    assert "ApiTopic" in await admin.topic_list()
    normal = {t["topic"]: t for t in (await api.get("/clusters/local/topics?kind=normal"))["topics"]}
    assert normal["ApiTopic"]["readQueues"] == 3 and normal["ApiTopic"]["brokers"] == ["broker-a"]
    system = {t["topic"] for t in (await api.get("/clusters/local/topics?kind=system"))["topics"]}
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "DefaultCluster", "broker-a"} <= system and "ApiTopic" not in system

    sent = await api.post("/clusters/local/topics/ApiTopic/messages", {"body": "hello", "keys": "k1 k2", "tags": "T"})
    assert sent["status"] == "SEND_OK"
    detail = await api.get("/clusters/local/topics/ApiTopic")
    assert detail["queues"] == await admin.topic_stats("ApiTopic") and detail["messages"] == 1
    assert detail["route"][0]["readQueues"] == 3
    assert detail["timers"] == {"pending": 0, "earliestDueMs": None}
    due_ms = int(time.time() * 1000) + 600_000
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("ApiTopic", b"later", properties={"TIMER_DELIVER_MS": str(due_ms)}))
    detail = await api.get("/clusters/local/topics/ApiTopic")
    assert detail["timers"] == {"pending": 1, "earliestDueMs": due_ms - due_ms % 1000}

    await api.call("DELETE", "/clusters/local/topics/ApiTopic")
    assert "ApiTopic" not in await admin.topic_list()


@pytest.mark.parametrize("body,raw,needle", [
    (None, "not json", "JSON object"),
    ([1, 2], None, "JSON object"),
    ({}, None, "topic is required"),
    ({"topic": "bad name!"}, None, "illegal characters"),
    ({"topic": "T", "queues": 0}, None, "between 1 and 1024"),
    ({"topic": "T", "queues": "many"}, None, "must be an integer"),
    ({"topic": "T", "order": "yes"}, None, "true or false"),
])
async def test_bad_topic_requests_get_400_with_the_reason(api, body, raw, needle):
    error = await api.call("POST", "/clusters/local/topics", body, raw=raw, status=400)
    assert needle in error["error"]


async def test_other_bad_inputs_get_400(api, admin, cluster):
    await api.get("/clusters/local/topics?kind=weird", status=400)
    assert "does not exist" in (await api.call("DELETE", "/clusters/local/topics/Nope", status=400))["error"]
    await api.post("/clusters/local/topics/Nope/messages", {"body": "x"}, status=400)
    await _topic_with_messages(cluster, admin, "Bad", 1)
    await api.post("/clusters/local/topics/Bad/messages", {}, status=400)
    await api.post("/clusters/local/groups/g/consume", {"enable": "yes"}, status=400)
    await api.get("/clusters/local/groups/g/reset-preview?topic=Bad&to=yesterday", status=400)
    await api.get("/clusters/local/messages/by-time?topic=Bad&begin=10&end=5", status=400)
    await api.get("/clusters/local/messages/by-time?topic=Bad&end=5", status=400)
    await api.get("/clusters/local/messages/by-time?topic=Bad&begin=0&end=5&cursor=%%%", status=400)
    await api.get("/clusters/local/messages/by-time?topic=Bad&begin=0&end=5&limit=100000", status=400)
    await api.get("/clusters/local/messages/by-key?topic=Bad", status=400)
    await api.get("/clusters/local/messages/export?mode=key&topic=Bad&key=x&format=xml", status=400)
    await api.get("/clusters/local/messages/export?mode=everything", status=400)
    assert "name the topic" in (await api.get("/clusters/local/messages/by-id?id=NOT-AN-OFFSET-ID", status=400))["error"]
    await api.post("/clusters/local/messages/resend-dlq", {}, status=400)


async def test_group_lag_enable_and_an_offset_reset_that_does_what_its_preview_said(api, admin, cluster):
    await _topic_with_messages(cluster, admin, "Lagging", 20, queues=2)
    await admin.create_group("lagger")
    async with PullConsumer("lagger", namesrv_addr=cluster.namesrv_addr) as consumer:
        for q in range(2):
            await consumer.commit(MessageQueue("Lagging", "broker-a", q), 4)
    expected = (await admin.consume_stats("lagger")).total_lag()
    listed = {g["group"]: g for g in (await api.get("/clusters/local/groups"))["groups"]}
    assert listed["lagger"]["totalLag"] == expected == 12 and listed["lagger"]["consumeEnable"] is True
    detail = await api.get("/clusters/local/groups/lagger")
    assert detail["totalLag"] == expected and sum(q["lag"] for q in detail["queues"]) == expected
    assert detail["clients"] == []

    await api.post("/clusters/local/groups/lagger/consume", {"enable": False})
    assert (await api.get("/clusters/local/groups/lagger"))["consumeEnable"] is False
    alerts = (await api.get("/clusters/local/overview"))["alerts"]
    assert [a["subject"] for a in alerts if a["kind"] == "group-disabled"] == ["lagger"]
    await api.post("/clusters/local/groups/lagger/consume", {"enable": True})
    assert (await admin.consume_stats("lagger")).consume_enable is True

    # To the store time of a message in the middle: the preview says where each queue goes,
    # the reset then moves them exactly there.
    middle = (await admin.query_messages("Lagging", "lagging-9"))[0]
    preview = await api.get(f"/clusters/local/groups/lagger/reset-preview?topic=Lagging&to={middle.store_timestamp}")
    targets = {(q["brokerName"], q["queueId"]): q["target"] for q in preview["queues"]}
    assert all(q["current"] == 4 for q in preview["queues"])
    done = await api.post("/clusters/local/groups/lagger/reset", {"topic": "Lagging", "to": str(middle.store_timestamp)})
    assert {(q["brokerName"], q["queueId"]): q["offset"] for q in done["queues"]} == targets
    assert all(q["before"] == 4 for q in done["queues"])
    after = await admin.consume_stats("lagger")
    assert {(mq.broker_name, mq.queue_id): w.consumer_offset for mq, w in after.offset_table.items()} == targets

    latest = await api.get("/clusters/local/groups/lagger/reset-preview?topic=Lagging&to=latest")
    assert latest["toConsume"] == 0 and all(q["target"] == 10 for q in latest["queues"])


async def test_time_range_pages_cover_every_message_once_and_export_matches(api, admin, cluster):
    await _topic_with_messages(cluster, admin, "Paged", 23, queues=3)
    seen, cursor, pages = [], None, 0
    while True:
        path = "/clusters/local/messages/by-time?topic=Paged&begin=0&end=4102444800000&limit=7"
        page = await api.get(path + (f"&cursor={cursor}" if cursor else ""))
        pages += 1
        assert len(page["messages"]) <= 7 and page["estimatedTotal"] == 23
        seen += [m["keys"][0] for m in page["messages"]]
        cursor = page["next"]
        if not cursor:
            break
    assert sorted(seen) == sorted(f"paged-{i}" for i in range(23)) and pages == 4
    async with api.session.get(api.base + "/clusters/local/messages/export?mode=time&topic=Paged&begin=0"
                                          "&end=4102444800000&format=jsonl") as response:
        assert response.status == 200 and response.headers["X-FerryMQ-Expected"] == "23"
        assert "attachment" in response.headers["Content-Disposition"]
        lines = (await response.text()).splitlines()
    assert sorted(json.loads(line)["keys"][0] for line in lines) == sorted(seen)
    # A range that holds nothing: an empty page, no cursor.
    empty = await api.get("/clusters/local/messages/by-time?topic=Paged&begin=0&end=1")
    assert empty["messages"] == [] and empty["next"] is None


async def test_find_by_key_and_id_show_properties_and_body(api, admin, cluster):
    await admin.create_topic("Found", read_queues=1, write_queues=1)
    await wait_until(lambda: _routed(admin, "Found"), 10, "a route for Found")
    from ferrymq.client.producer import Producer
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        m = Message("Found", bytes([0, 159, 146, 150]), properties={"color": "blue"})
        m.keys = ["bin-1"]
        sent = await producer.send(m)
    found = (await api.get("/clusters/local/messages/by-key?topic=Found&key=bin-1"))["messages"]
    assert len(found) == 1 and found[0]["bodyEncoding"] == "binary" and found[0]["body"] is None
    assert found[0]["bodyBase64"] == "AJ+Slg==" and found[0]["properties"]["color"] == "blue"
    by_offset_id = (await api.get(f"/clusters/local/messages/by-id?id={sent.offset_msg_id}"))["messages"][0]
    by_client_id = (await api.get(f"/clusters/local/messages/by-id?id={sent.msg_id}&topic=Found"))["messages"][0]
    assert by_offset_id["msgId"] == by_client_id["msgId"] == sent.msg_id
    # Not a dead letter: no resend.
    error = await api.post("/clusters/local/messages/resend-dlq", {"offsetMsgId": sent.offset_msg_id}, status=400)
    assert "not a dead-letter" in error["error"]


async def test_a_messages_trace_shows_its_publish_and_each_groups_deliveries(tmp_path):
    """Trace records in the broker's trace topic (traceTopicEnable), written as the 4.9.7 client
    writes them: the API gives the events ``ferrymq admin message trace`` reads, and arranges
    them as the publish and, per consumer group, each delivery with its result."""
    cluster = await InProcessCluster(tmp_path / "store", settings={"traceTopicEnable": "true"}).start()
    server = await _console(cluster)
    try:
        async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin, aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            await admin.create_topic("Traced", read_queues=1, write_queues=1)
            await wait_until(lambda: _routed(admin, "Traced"), 10, "a route for Traced")
            sent, t0 = await trace_records.send_traced(
                cluster.namesrv_addr, cluster.broker_addr, "Traced",
                [Delivery("billing", 10, retry_times=0, success=False, cost_ms=5, return_type="FAILED"),
                 Delivery("audit", 20, retry_times=0, success=True, cost_ms=2),
                 Delivery("billing", 1000, retry_times=1, success=True, cost_ms=7)],
                extra_bodies=("Pub\x01not a trace\x02",))
            trace = await api.get(f"/clusters/local/messages/trace?id={sent.msg_id}")
            by_offset_id = await api.get(f"/clusters/local/messages/trace?id={sent.offset_msg_id}")
            by_cli = await admin.message_trace(sent.msg_id)
            stored = await admin.find_message(sent.offset_msg_id)
            nothing = await api.get("/clusters/local/messages/trace?id=0A0000000000000000000000000000FF")
            elsewhere = await api.get(f"/clusters/local/messages/trace?id={sent.msg_id}&traceTopic=OtherTrace")
            missing_id = await api.get("/clusters/local/messages/trace", status=400)
    finally:
        await server.stop()
        await cluster.stop()
    assert (trace["state"], trace["traceTopic"], trace["traceTopicEnabledOn"]) == \
        ("found", "RMQ_SYS_TRACE_TOPIC", ["RMQ_SYS_TRACE_TOPIC"])
    assert trace["events"] == [e.to_dict() for e in by_cli.events], "the same events the CLI shows"
    assert by_offset_id == trace, "an offset msgId finds the message, then its trace"
    [pub] = trace["publish"]
    assert (pub["group"], pub["topic"], pub["tags"], pub["keys"], pub["costMs"], pub["success"]) == \
        ("shop_P", "Traced", "paid", "order-1", 3, True)
    assert pub["timestamp"] == t0 and pub["storeTimestamp"] == stored.store_timestamp
    assert pub["clientHost"].startswith("127.0.0.1:") and pub["storeHost"] == cluster.broker_addr
    assert [(g["group"], g["deliveries"], g["lastResult"]) for g in trace["groups"]] == \
        [("audit", 1, "success"), ("billing", 2, "success")]
    billing = trace["groups"][1]["attempts"]
    assert [(a["timestamp"], a["retryTimes"], a["costMs"], a["success"], a["returnType"]) for a in billing] == \
        [(t0 + 10, 0, 5, False, "FAILED"), (t0 + 1000, 1, 7, True, "SUCCESS")]
    assert all(a["clientHost"].startswith("127.0.0.1:") for a in billing)
    [bad] = trace["undecodable"]
    assert "Pub record has 2 fields" in bad["reason"] and trace["notice"] is None
    assert nothing["state"] == "no-record" and nothing["events"] == [] and "No trace record" in nothing["notice"]
    assert elsewhere["state"] == "no-trace-topic" and "no trace topic OtherTrace" in elsewhere["notice"]
    assert "id is required" in missing_id["error"]


async def test_a_trace_on_a_cluster_without_message_trace_says_it_is_not_enabled(api, admin, cluster):
    await _topic_with_messages(cluster, admin, "Untraced", 1)
    [m] = await admin.query_messages("Untraced", "untraced-0")
    trace = await api.get(f"/clusters/local/messages/trace?id={m.client_msg_id}")
    assert trace["state"] == "no-trace-topic" and trace["traceTopicEnabledOn"] == [] and trace["events"] == []
    assert "not enabled" in trace["notice"] and "traceTopicEnable" in trace["notice"]


async def test_an_export_bigger_than_the_limit_is_refused_up_front(cluster, admin):
    await _topic_with_messages(cluster, admin, "Big", 6)
    server = await _console(cluster, max_export=5)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            error = await api.get("/clusters/local/messages/export?mode=time&topic=Big&begin=0&end=4102444800000",
                                  status=400)
    finally:
        await server.stop()
    assert "at most 5" in error["error"]


async def test_a_read_only_console_refuses_every_write_and_still_reads(cluster, admin):
    await _topic_with_messages(cluster, admin, "Kept", 1)
    server = await _console(cluster, read_only=True)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            assert (await api.get("/config"))["readOnly"] is True
            for method, path, body in [("POST", "/clusters/local/topics", {"topic": "New"}),
                                       ("DELETE", "/clusters/local/topics/Kept", None),
                                       ("POST", "/clusters/local/topics/Kept/messages", {"body": "x"}),
                                       ("POST", "/clusters/local/groups/g/consume", {"enable": True}),
                                       ("POST", "/clusters/local/groups/g/reset", {"topic": "Kept", "to": "earliest"}),
                                       ("POST", "/clusters/local/messages/resend-dlq", {"offsetMsgId": "x"})]:
                error = await api.call(method, path, body, status=403)
                assert "read-only" in error["error"]
            assert any(t["topic"] == "Kept" for t in (await api.get("/clusters/local/topics"))["topics"])
    finally:
        await server.stop()
    assert "New" not in await admin.topic_list() and "Kept" in await admin.topic_list()


async def test_the_overview_shows_the_broker_and_rates_from_its_counters(cluster, admin):
    server = await _console(cluster, sample_seconds=0.2)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            overview = await api.get("/clusters/local/overview")
            [broker] = overview["brokers"]
            assert broker["address"] == cluster.broker_addr and broker["brokerId"] == 0
            assert 0 < broker["diskRatio"] < 1 and broker["diskWarningRatio"] == 0.9
            assert overview["alerts"] == [] and broker["heldPulls"] == 0
            await admin.create_topic("Held", read_queues=1, write_queues=1, broker_addr=cluster.broker_addr)
            held = asyncio.ensure_future(_held_pull(cluster.broker_addr, "Held"))

            async def pull_held():
                return (await api.get("/clusters/local/overview"))["brokers"][0]["heldPulls"] == 1
            await wait_until(pull_held, 10, "the held pull counted")
            held.cancel()
            await _topic_with_messages(cluster, admin, "Rated", 10)

            async def rate_seen():
                points = (await api.get("/clusters/local/overview"))["rates"]
                return any(p[1] > 0 for p in points)
            await wait_until(rate_seen, 10, "a sample with messages coming in")
    finally:
        await server.stop()


async def test_a_broker_gone_from_the_name_server_raises_an_alert(cluster):
    server = await _console(cluster)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            assert (await api.get("/clusters/local/overview"))["alerts"] == []
            await cluster.broker.stop()  # unregisters
            cluster.broker = None
            await wait_until(lambda: server.sampler.overview(server.connections.get("local"), max_age=0), 5,
                             "a fresh sample")
            kinds = {a["kind"] for a in (await api.get("/clusters/local/overview"))["alerts"]}
    finally:
        await server.stop()
    assert {"broker-unregistered", "no-broker"} <= kinds


async def test_a_cluster_that_cannot_be_reached_is_a_502_and_an_overview_alert():
    from testkit.ports import free_port

    server = ConsoleServer(ConsoleSettings([ClusterSpec("gone", f"127.0.0.1:{free_port()}")], port=0, read_only=False))
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.url + "/api")
            error = await api.get("/clusters/gone/topics", status=502)
            assert "cannot be reached" in error["error"]
            overview = await api.get("/clusters/gone/overview")
    finally:
        await server.stop()
    assert overview["brokers"] == [] and [a["kind"] for a in overview["alerts"]] == ["namesrv-unreachable"]


async def test_with_acl_the_console_signs_as_its_account(tmp_path):
    """Brokers with aclEnable: the console's account (as the CLI takes it) signs every call;
    without one, the brokers' refusal reaches the page as a 502 that says why."""
    from ferrymq.acl.signature import Credentials
    from ferrymq.client.config import ClientConfig
    from tests.support import InProcessCluster

    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: console01\n    secretKey: console-secret\n    admin: true\n")
    cluster = InProcessCluster(tmp_path / "store", settings={"aclEnable": "true", "aclFile": str(acl_file)})
    await cluster.start()
    signed = ConsoleServer(ConsoleSettings(
        [ClusterSpec("local", cluster.namesrv_addr)],
        {"local": ClientConfig(credentials=Credentials("console01", "console-secret"))}, port=0, read_only=False))
    unsigned = ConsoleServer(ConsoleSettings([ClusterSpec("local", cluster.namesrv_addr)],
                                             {"local": ClientConfig(credentials=None)}, port=0, read_only=False))
    await signed.start()
    await unsigned.start()
    try:
        async with aiohttp.ClientSession() as session:
            created = await Api(session, signed.url + "/api").post("/clusters/local/topics", {"topic": "Signed"})
            assert created["brokers"] == [cluster.broker_addr]
            refused = await Api(session, unsigned.url + "/api").post("/clusters/local/topics", {"topic": "Unsigned"},
                                                                      status=502)
    finally:
        await unsigned.stop()
        await signed.stop()
        await cluster.stop()
    assert "refused" in refused["error"]


async def test_the_pages_and_their_assets_are_served_by_the_console_itself(api):
    """index.html, its modules and stylesheet: served here with the right types, nothing
    loaded from elsewhere (a Content-Security-Policy of 'self' says so to the browser too)."""
    import re

    base = api.base[: -len("/api")]
    async with api.session.get(base + "/") as response:
        assert response.status == 200 and response.content_type == "text/html"
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        html = await response.text()
    pending = set(re.findall(r'(?:src|href)="(/static/[^"]+)"', html))
    seen = set()
    while pending:
        path = pending.pop()
        seen.add(path)
        async with api.session.get(base + path) as response:
            assert response.status == 200, path
            text = await response.text()
        kind = path.rsplit(".", 1)[1]
        assert response.content_type in {"js": ("text/javascript", "application/javascript"), "css": ("text/css",),
                                         "svg": ("image/svg+xml",)}[kind], path
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), f"{path} names another origin"
        if kind == "js":  # the modules it imports
            for module in re.findall(r'from "(\.{1,2}/[^"]+)"', text):
                target = "/".join(path.split("/")[:-1] + [module]).replace("/./", "/")
                while "/../" in target:
                    target = re.sub(r"/[^/]+/\.\./", "/", target, count=1)
                if target not in seen:
                    pending.add(target)
    assert {"/static/app.js", "/static/pages/messages.js", "/static/chart.js", "/static/style.css"} <= seen


async def _held_pull(addr: str, topic: str) -> None:
    """A long-polling pull on an empty queue: the broker holds it (up to 30 s)."""
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.remoting.codes import RequestCode
    from ferrymq.remoting.command import RemotingCommand

    client = RemotingClient()
    try:
        await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "holder", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 6,
            "commitOffset": 0, "suspendTimeoutMillis": 30000, "subscription": "*", "subVersion": 0}), 40)
    finally:
        await client.close()


async def _pop(cluster, group: str, topic: str, n: int) -> list:
    """A POP receiver over remoting (as RocketMQ 5's remoting POP consumers do): ``n`` messages,
    the first acked."""
    client = RemotingClient()
    try:
        r = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": n, "invisibleTime": 60_000,
            "pollTime": 0, "bornTime": int(time.time() * 1000), "initMode": 0, "expType": "TAG", "exp": "*",
            "order": False}), 5)
        assert r.code == ResponseCode.SUCCESS, r.remark
        got = sorted(decode_records(r.body), key=lambda m: m.queue_offset)
        acked = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": 0, "offset": got[0].queue_offset,
            "extraInfo": got[0].properties["POP_CK"]}))
        assert acked.code == ResponseCode.SUCCESS
        return got
    finally:
        await client.close()


async def test_a_pop_group_shows_its_receiver_by_protocol_and_its_lag(api, admin, cluster):
    await _topic_with_messages(cluster, admin, "Popped", 5, queues=1)
    await _pop(cluster, "popper", "Popped", 5)
    listed = {g["group"]: g for g in (await api.get("/clusters/local/groups"))["groups"]}
    assert listed["popper"]["clients"] == 1 and listed["popper"]["clientsByProtocol"] == {"POP": 1}
    assert listed["popper"]["totalLag"] == 4, "received but not acked is still lag"
    detail = await api.get("/clusters/local/groups/popper")
    [client] = detail["clients"]
    assert client["protocol"] == "POP" and client["subscriptions"] == {"Popped": "*"}
    assert detail["consumeType"] == "CONSUME_POP" and detail["totalLag"] == 4
