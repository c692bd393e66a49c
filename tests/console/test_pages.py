"""The console in a real browser (headless Chromium) against ``ferrymq console`` and a real
``ferrymq standalone``: every page loads without console errors, and what a user does in the
pages is what the admin client then sees. Screenshots land in .cache/console-screenshots."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import pytest_asyncio

from ferrymq.client.listener import ConsumeConcurrentlyStatus
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.message import Message, decode_records
from ferrymq.common.protocol import MessageQueue, dlq_topic
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.console import trace_records
from tests.console.conftest import ACCOUNTS, TRACE_URL
from tests.console.trace_records import Delivery
from tests.consumer_support import Recorder, produce
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

TOPIC = "Orders"
GROUP = "billing"
MESSAGES = 40


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seeded(ferry, admin):
    """Orders with 40 JSON messages (keys order-0..39) on 4 queues; group billing has consumed
    the first 3 of each queue."""
    await admin.create_topic(TOPIC, read_queues=4, write_queues=4)
    await admin.create_group(GROUP)
    await wait_until(lambda: _routed(admin, TOPIC), 10, f"a route for {TOPIC}")
    async with Producer("orders-producer", namesrv_addr=ferry.namesrv_addr) as producer:
        for i in range(MESSAGES):
            m = Message(TOPIC, json.dumps({"order": i, "item": "tea", "quantity": i % 3 + 1}).encode())
            m.keys = [f"order-{i}"]
            await producer.send(m)
    async with PullConsumer(GROUP, namesrv_addr=ferry.namesrv_addr) as consumer:
        for q in range(4):
            await consumer.commit(MessageQueue(TOPIC, "broker-a", q), 3)
    return admin


async def test_overview_shows_the_broker_its_rates_and_no_alert(console_page, seeded, ferry):
    p, admin = console_page, seeded
    await p.open("overview")
    row = p.page.locator("[data-testid=brokers] tbody tr")
    await row.first.wait_for()
    text = await row.first.inner_text()
    assert "broker-a" in text and ferry.broker_addr in text and "MASTER" in text
    assert "%" in text, "disk use is shown as a percentage"
    await p.page.locator("[data-testid=alerts]").filter(has_text="No alerts").wait_for()
    assert await p.page.locator("[data-testid=stat-topics]").inner_text() != "–"
    # Traffic while the page watches: the console samples every second and the page redraws,
    # until the chart's "in" line leaves the zero line.
    await admin.create_topic("Traffic", read_queues=1, write_queues=1)
    await wait_until(lambda: _routed(admin, "Traffic"), 10, "a route for Traffic")
    async with Producer("traffic", namesrv_addr=ferry.namesrv_addr) as producer:
        async def keep_sending():
            while True:
                await producer.send(Message("Traffic", b"tick"))
                await asyncio.sleep(0.02)
        sender = asyncio.ensure_future(keep_sending())
        try:
            await p.page.wait_for_function(
                """() => { const line = document.querySelector("svg.chart path.line.in");
                           return line && /,([0-9.]+)/g.test(line.getAttribute("d"))
                                  && [...line.getAttribute("d").matchAll(/,([0-9.]+)/g)].some(m => Number(m[1]) < 180); }""",
                timeout=20_000)
        finally:
            sender.cancel()
    assert (await p.page.get_by_test_id("stat-in").inner_text()).endswith("msg/s")
    await p.screenshot("overview")
    p.assert_no_errors()


async def test_a_group_disabled_elsewhere_shows_an_alert_and_is_re_enabled_from_its_page(console_page, seeded):
    p, admin = console_page, seeded
    await admin.disable_group(GROUP)  # as broker protection does
    try:
        await p.open("overview")
        await p.page.locator("[data-testid=alerts] li", has_text=f"group {GROUP} may not consume").wait_for()
        await p.open(f"groups?cluster=local&group={GROUP}")
        await p.page.get_by_test_id("consume-state").filter(has_text="disabled").wait_for()
        await p.screenshot("group-disabled")
        await p.page.get_by_test_id("enable-group").click()
        await p.page.get_by_test_id("consume-state").filter(has_text="consuming").wait_for()
        assert (await admin.consume_stats(GROUP)).consume_enable is True
    finally:
        await admin.enable_group(GROUP)
    p.assert_no_errors()


async def test_a_read_only_console_offers_no_write_action(read_only_page, seeded):
    p = read_only_page
    await p.open("topics?cluster=local&topic=Orders")
    await p.page.get_by_test_id("queues").wait_for()
    assert await p.page.locator("#mode").inner_text() == "read-only"
    for testid in ("send-test", "delete-topic"):
        assert await p.page.get_by_test_id(testid).is_disabled()
    await p.open("topics")
    assert await p.page.get_by_test_id("new-topic").is_disabled()
    await p.open(f"groups?cluster=local&group={GROUP}")
    assert await p.page.get_by_test_id("reset-apply").is_disabled()
    # The preview still works: it changes nothing.
    await p.page.get_by_test_id("reset-preview-button").click()
    await p.page.get_by_test_id("reset-preview").wait_for()
    await p.screenshot("read-only-group")
    p.assert_no_errors()


SIGN_IN = re.compile(r"/signin(#.*)?$")  # a redirect keeps the page's fragment


async def _sign_in(p, name: str, password: str) -> None:
    await p.page.locator("input[name=name]").fill(name)
    await p.page.locator("input[name=password]").fill(password)
    await p.page.get_by_role("button", name="Sign in").click()


async def test_sign_in_shows_the_console_by_role_and_sign_out_ends_it(signed_page, seeded):
    p = signed_page
    await p.open("topics?cluster=local&topic=Orders")
    await p.page.wait_for_url(SIGN_IN)  # nothing but the sign-in page without a session
    await _sign_in(p, "vera", "not her password")
    message = p.page.get_by_test_id("signin-message")
    assert await message.inner_text() == "Wrong name or password."
    await p.screenshot("sign-in-failed")
    password, _, _ = ACCOUNTS["vera"]
    await _sign_in(p, "vera", password)
    assert await p.page.get_by_test_id("user").inner_text() == "vera · viewer"
    assert await p.page.locator("#mode").inner_text() == "read-only"
    await p.open("topics")
    assert await p.page.get_by_test_id("new-topic").is_disabled()
    # a viewer without body viewing finds the message, not its body
    await p.open("messages?cluster=local&mode=key")
    await p.page.get_by_test_id("msg-topic").fill(TOPIC)
    await p.page.get_by_test_id("msg-key").fill("order-7")
    await p.page.get_by_test_id("search").click()
    row = p.page.locator("[data-testid=results] tbody tr").first
    assert "hidden" in await row.inner_text() and "tea" not in await row.inner_text()
    await row.click()
    body = p.page.get_by_test_id("message-body")
    assert "body hidden" in await body.inner_text()
    await p.screenshot("viewer-message-detail")
    await p.page.get_by_test_id("sign-out").click()
    await p.page.wait_for_url(re.compile(r"/signin\?m=signedout$"))
    await p.open("overview")
    await p.page.wait_for_url(SIGN_IN)
    p.assert_no_errors()


async def test_an_admin_signed_in_creates_a_topic_with_the_sessions_csrf_token(signed_page, seeded):
    p, admin = signed_page, seeded
    await p.page.goto(f"{p.base_url}/signin")
    password, _, _ = ACCOUNTS["ada"]
    await _sign_in(p, "ada", password)
    assert await p.page.get_by_test_id("user").inner_text() == "ada · admin"
    await p.open("topics")
    await p.page.get_by_test_id("new-topic").click()
    await p.page.get_by_test_id("topic-name").fill("SignedCreated")
    await p.page.get_by_test_id("dialog-ok").click()
    await p.page.locator("h1", has_text="SignedCreated").wait_for()
    assert "SignedCreated" in await admin.topic_list()
    p.assert_no_errors()


async def test_topic_created_in_the_ui_is_listed_by_the_admin_client_then_deleted(console_page, seeded, ferry):
    p, admin = console_page, seeded
    await p.open("topics")
    await p.page.locator("[data-testid=topics] tr[data-topic=Orders]").wait_for()
    await p.screenshot("topics")
    await p.page.get_by_test_id("new-topic").click()
    await p.page.get_by_test_id("topic-name").fill("UiCreated")
    await p.page.locator("dialog input[name=readQueues]").fill("3")
    await p.page.locator("dialog input[name=writeQueues]").fill("3")
    await p.page.get_by_test_id("dialog-ok").click()
    # The page moves to the new topic: its route and its three queues.
    await p.page.locator("h1", has_text="UiCreated").wait_for()
    await p.page.locator("[data-testid=queues] tbody tr").nth(2).wait_for()
    assert "UiCreated" in await admin.topic_list()
    route = await admin.topic_route("UiCreated")
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(3, 3)]
    assert await p.page.get_by_test_id("topic-timers").inner_text() == "0"  # no timer message waits
    async with Producer("timer-producer", namesrv_addr=ferry.namesrv_addr) as producer:
        await producer.send(Message("UiCreated", b"later", properties={"TIMER_DELAY_SEC": "600"}))
    await p.page.reload()
    await p.page.get_by_test_id("topic-timers").filter(has_text="1").wait_for()
    assert "first due" in (await p.page.locator(".stat", has=p.page.get_by_test_id("topic-timers")).inner_text()).lower()
    await p.screenshot("topic-detail")

    await p.page.get_by_test_id("delete-topic").click()
    await p.page.locator("dialog input[name=confirm]").fill("UiCreated")
    await p.page.get_by_test_id("dialog-ok").click()
    await p.page.locator("h1", has_text="Topics").wait_for()
    assert "UiCreated" not in await admin.topic_list()
    p.assert_no_errors()


async def test_a_groups_lag_in_the_ui_equals_the_admin_clients(console_page, seeded):
    p, admin = console_page, seeded
    expected = (await admin.consume_stats(GROUP)).total_lag()
    assert expected == MESSAGES - 12
    await p.open("groups")
    cell = p.page.locator(f"[data-testid=groups] tr[data-group={GROUP}] td[data-col=lag]")
    assert int((await cell.inner_text()).replace(",", "")) == expected
    await p.screenshot("groups")
    await p.page.get_by_role("link", name=GROUP, exact=True).click()
    total = p.page.get_by_test_id("total-lag")
    await total.wait_for()
    assert int((await total.inner_text()).replace(",", "")) == expected
    per_queue = await p.page.locator("[data-testid=lag] tbody tr:not(.total) td[data-col=lag]").all_inner_texts()
    assert len(per_queue) == 4 and sum(int(v.replace(",", "")) for v in per_queue) == expected
    await p.screenshot("group-detail")
    p.assert_no_errors()


async def test_a_message_found_by_key_shows_its_body(console_page, seeded):
    p, admin = console_page, seeded
    await p.open("messages?cluster=local&mode=key")
    await p.page.get_by_test_id("msg-topic").fill(TOPIC)
    await p.page.get_by_test_id("msg-key").fill("order-7")
    await p.page.get_by_test_id("search").click()
    await p.page.locator("[data-testid=results] tbody tr").first.click()
    body = p.page.get_by_test_id("message-body")
    await body.wait_for()
    stored = json.loads((await admin.query_messages(TOPIC, "order-7"))[0].body)
    shown = await body.inner_text()
    assert json.loads(shown) == stored and '\n  "item": "tea"' in shown, "JSON bodies are pretty-printed"
    await p.page.locator("button.chip[data-view=hex]").click()
    assert (await body.inner_text()).startswith("00000000  ")
    await p.page.locator("button.chip[data-view=json]").click()
    await p.screenshot("message-detail")
    p.assert_no_errors()


async def test_a_message_with_an_opentelemetry_trace_context_links_its_trace_id(console_page, seeded, ferry):
    p, admin = console_page, seeded
    trace_id, topic = "4bf92f3577b34da6a3ce929d0e0e4736", "OtelTraced"  # a topic of its own: Orders holds 40
    await admin.create_topic(topic, read_queues=1, write_queues=1)
    await wait_until(lambda: _routed(admin, topic), 10, f"a route for {topic}")
    async with Producer("traced-producer", namesrv_addr=ferry.namesrv_addr) as producer:
        m = Message(topic, b"{}")
        m.keys = ["traced-1"]
        m.properties["traceparent"] = f"00-{trace_id}-00f067aa0ba902b7-01"
        await producer.send(m)
    await p.open(f"messages?cluster=local&mode=key&topic={topic}&key=traced-1")
    await p.page.get_by_test_id("search").click()
    await p.page.locator("[data-testid=results] tbody tr").first.click()
    link = p.page.get_by_test_id("trace-id").locator("a")
    assert await link.inner_text() == trace_id
    assert await link.get_attribute("href") == TRACE_URL.replace("{traceId}", trace_id)
    p.assert_no_errors()


async def test_a_messages_trace_on_its_page_and_by_its_id(console_page, seeded, ferry):
    """Trace records in the broker's trace topic, as the official clients write them: the
    message's page shows its publish and each group's deliveries with their result; the Trace
    search finds the same by message id, and says so when a message has no record."""
    p, admin = console_page, seeded
    await admin.create_topic("Traced", read_queues=1, write_queues=1)
    await wait_until(lambda: _routed(admin, "Traced"), 10, "a route for Traced")
    sent, _ = await trace_records.send_traced(
        ferry.namesrv_addr, ferry.broker_addr, "Traced",
        [Delivery("shipping", 10, retry_times=0, success=False, cost_ms=5, return_type="FAILED"),
         Delivery("shipping", 1000, retry_times=1, success=True, cost_ms=7)], cost_ms=4)
    await wait_until(lambda: _traced(admin, sent.msg_id, 5), 10, "the trace records indexed")

    await p.open("messages?cluster=local&mode=key&topic=Traced&key=order-1")
    await p.page.locator("[data-testid=results] tbody tr").first.click()
    await _check_trace(p.page.get_by_test_id("trace"))
    await p.screenshot("message-trace")

    await p.open("messages?cluster=local&mode=trace")
    await p.page.get_by_test_id("msg-id").fill(sent.msg_id)
    await p.page.get_by_test_id("search").click()
    await _check_trace(p.page.get_by_test_id("trace"))
    assert not await p.page.get_by_test_id("trace-notice").count()

    untraced = (await admin.query_messages(TOPIC, "order-7"))[0]
    await p.page.get_by_test_id("msg-id").fill(untraced.client_msg_id)
    await p.page.get_by_test_id("search").click()
    notice = p.page.get_by_test_id("trace-notice")
    await notice.wait_for()
    assert "No trace record" in await notice.inner_text()
    await p.screenshot("trace-no-record")
    assert not await p.page.get_by_test_id("trace-publish").count()
    p.assert_no_errors()


async def _check_trace(trace) -> None:
    publish = trace.locator("[data-testid=trace-publish] tbody tr")
    await publish.wait_for()
    assert await publish.locator("td[data-col=group]").inner_text() == "shop_P"
    assert (await publish.locator("td[data-col=client]").inner_text()).startswith("127.0.0.1:")
    assert await publish.locator("td[data-col=stored]").inner_text() != "–", "the message's store time"
    assert await publish.locator("td[data-col=cost]").inner_text() == "4 ms"
    assert await publish.locator("td[data-col=status]").inner_text() == "success"
    group = trace.locator(".trace-group[data-group=shipping]")
    assert "2 deliveries" in await group.locator("h4").inner_text()
    assert await group.locator("td[data-col=retry]").all_inner_texts() == ["0", "1"]
    assert await group.locator("td[data-col=cost]").all_inner_texts() == ["5 ms", "7 ms"]
    assert [r.split() for r in await group.locator("td[data-col=result]").all_inner_texts()] == \
        [["failed", "reconsume", "later"], ["success"]]


async def _traced(admin, msg_id: str, records: int) -> bool:
    return len((await admin.message_trace(msg_id)).events) == records


async def test_a_reset_to_earliest_moves_the_group_back(console_page, seeded):
    p, admin = console_page, seeded
    await p.open(f"groups?cluster=local&group={GROUP}")
    await p.page.get_by_test_id("total-lag").wait_for()
    await p.page.get_by_test_id("reset-to").select_option("earliest")
    await p.page.get_by_test_id("reset-preview-button").click()
    await p.page.get_by_test_id("reset-preview").wait_for()
    targets = await p.page.locator("[data-testid=reset-preview] td[data-col=target]").all_inner_texts()
    assert targets == ["0"] * 4, "the preview shows every queue going back to 0"
    await p.screenshot("reset-preview")
    await p.page.get_by_test_id("reset-apply").click()
    await p.page.get_by_test_id("dialog-ok").click()
    await wait_until(lambda: _total_lag(admin), 10, "the group's lag to cover every message")
    stats = await admin.consume_stats(GROUP)
    assert {w.consumer_offset for w in stats.offset_table.values()} == {0}
    assert stats.total_lag() == MESSAGES
    # And the page, reloaded by the reset, shows the new figure.
    await p.page.get_by_test_id("total-lag").filter(has_text=str(MESSAGES)).wait_for()
    p.assert_no_errors()


async def _total_lag(admin) -> bool:
    return (await admin.consume_stats(GROUP)).total_lag() == MESSAGES


async def test_a_dead_letter_resent_from_the_ui_is_consumed_by_its_group(console_page, seeded, ferry):
    p, admin = console_page, seeded
    group, topic = "payments", "Payments"
    await admin.create_topic(topic, read_queues=2, write_queues=2)
    await admin.create_group(group)
    await wait_until(lambda: _routed(admin, topic), 10, f"a route for {topic}")
    recorder = Recorder()
    # max_reconsume_times=0: the first failure goes straight to the group's DLQ.
    consumer = PushConsumer(group, namesrv_addr=ferry.namesrv_addr, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            max_reconsume_times=0)
    consumer.subscribe(topic).register_listener(recorder.listener(
        "payments", fail=lambda m: len(recorder.of("poison-0")) == 1,
        result_on_fail=ConsumeConcurrentlyStatus.RECONSUME_LATER))
    await consumer.start()
    try:
        await produce(ferry.namesrv_addr, topic, 1, prefix="poison")
        await wait_until(lambda: _in_dlq(admin, group), 20, "the failed message in the group's DLQ")
        await p.open(f"messages?cluster=local&mode=key&topic={dlq_topic(group)}&key=poison-0")
        await p.page.locator("[data-testid=results] tbody tr").first.click()
        await p.page.get_by_test_id("resend-dlq").click()
        await p.screenshot("dead-letter")
        await p.page.get_by_test_id("dialog-ok").click()
        await p.page.locator(".toast.ok", has_text="Resent").wait_for()
        await wait_until(lambda: len(recorder.of("poison-0")) == 2, 30, "the group consuming the resent message")
    finally:
        await consumer.shutdown()
    again = recorder.of("poison-0")[1]
    assert again.topic == topic, "the group's listener sees the original topic"
    assert again.msg.body == b"poison-0:" + b"x" * 16
    p.assert_no_errors()


async def _routed(admin, topic: str) -> bool:
    try:
        return bool((await admin.topic_route(topic)).queue_datas)
    except Exception:  # noqa: BLE001 - not registered with the name server yet
        return False


async def _in_dlq(admin, group: str) -> bool:
    try:
        return bool(await admin.query_messages(dlq_topic(group), "poison-0"))
    except Exception:  # noqa: BLE001 - the DLQ topic has no route until the first dead letter
        return False


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_an_export_downloads_every_matching_message(console_page, seeded, fmt, tmp_path):
    p, admin = console_page, seeded
    await p.open(f"messages?cluster=local&mode=time&topic={TOPIC}&begin=0&end=4102444800000")
    await p.page.locator("[data-testid=results] tbody tr").first.wait_for()
    assert "of about 40" in await p.page.get_by_test_id("result-count").inner_text()
    await p.screenshot("messages-time-range")
    async with p.page.expect_download() as download_info:
        await p.page.get_by_test_id(f"export-{fmt}").click()
    download = await download_info.value
    assert download.suggested_filename.endswith(f".{fmt}")
    saved = tmp_path / download.suggested_filename
    await download.save_as(saved)
    lines = saved.read_text().splitlines()
    if fmt == "jsonl":
        keys = {json.loads(line)["keys"][0] for line in lines}
    else:
        import csv
        rows = list(csv.DictReader(lines))
        keys = {row["keys"] for row in rows}
    stored = sum(q["maxOffset"] - q["minOffset"] for q in await admin.topic_stats(TOPIC))
    assert stored == MESSAGES
    assert keys == {f"order-{i}" for i in range(MESSAGES)}, "every message of the range, once"
    assert len(lines) == MESSAGES + (1 if fmt == "csv" else 0)
    await p.page.get_by_test_id("export-done").wait_for()
    p.assert_no_errors()


async def test_a_pop_receivers_protocol_and_lag_are_on_the_groups_pages(console_page, seeded, ferry):
    """A RocketMQ 5-style POP receiver (POP_MESSAGE over remoting, no heartbeat) is listed with
    its protocol, and what it received but has not acked is the group's lag."""
    p, admin = console_page, seeded
    await admin.create_topic("Popped", read_queues=1, write_queues=1)
    await wait_until(lambda: _routed(admin, "Popped"), 10, "a route for Popped")
    await produce(ferry.namesrv_addr, "Popped", 5)
    client = RemotingClient()
    try:
        r = await client.invoke(ferry.broker_addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "popper", "topic": "Popped", "queueId": -1, "maxMsgNums": 5, "invisibleTime": 60_000,
            "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG", "exp": "*", "order": False}), 5)
        assert r.code == ResponseCode.SUCCESS, r.remark
        first = min(decode_records(r.body), key=lambda m: m.queue_offset)
        acked = await client.invoke(ferry.broker_addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": "popper", "topic": "Popped", "queueId": 0, "offset": first.queue_offset,
            "extraInfo": first.properties["POP_CK"]}))
        assert acked.code == ResponseCode.SUCCESS
    finally:
        await client.close()
    await p.open("groups")
    row = p.page.locator("[data-testid=groups] tr[data-group=popper]")
    assert (await row.locator("td[data-col=protocols]").inner_text()).split() == ["POP", "1"]
    assert int(await row.locator("td[data-col=lag]").inner_text()) == 4
    await p.page.get_by_role("link", name="popper", exact=True).click()
    protocol = p.page.locator("[data-testid=clients] tbody tr td[data-col=protocol]")
    await protocol.wait_for()
    assert await protocol.all_inner_texts() == ["POP"]
    assert int(await p.page.get_by_test_id("total-lag").inner_text()) == 4
    await p.screenshot("group-pop")
    p.assert_no_errors()
