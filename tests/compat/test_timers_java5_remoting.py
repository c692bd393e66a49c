"""Timer messages from Apache's 5.3.1 remoting client (``rocketmq-client``), the same test
against ``ferrymq standalone`` and against Apache's own 5.3.1 broker.

The client's 5.x setters (``setDelayTimeSec``, ``setDelayTimeMs``, ``setDeliverTimeMs``) ask for
delivery 6 s, 6.5 s and 7.7 s after the send (none a 4.x delay level): each message reaches the
push consumer in its own topic, not before it is due and within a generous bound after. A delay
past ``timerMaxDelaySec`` (3 days) is refused by both brokers with the same code and remark.
One client JVM per peer (``ferrymq.compat53.Timers``) does all of it.
"""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.admin import AdminClient
from testkit.grpc_clients import unique_names
from testkit.java_client import ROCKETMQ5_VERSION, run_java_client

pytestmark = pytest.mark.compat

TIMERS_MAIN = "ferrymq.compat53.Timers"
TIMERS = {"sec": 6, "ms": 6500, "deliver": 7700}  # setter: delay (s for sec, else ms)
SETTER_PROPERTY = {"sec": "TIMER_DELAY_SEC", "ms": "TIMER_DELAY_MS", "deliver": "TIMER_DELIVER_MS"}
LATE_BOUND_MS = 5000  # a correctness bound (a timer that fired at all), not a benchmark
TIMER_MAX_DELAY_SEC = 259200  # both brokers' default timerMaxDelaySec
MESSAGE_ILLEGAL = 13
# Apache 5.3.1's remark for WHEEL_TIMER_MSG_ILLEGAL, as its broker answered in this test
APACHE_REMARK = ("timer message illegal, the delay time should not be bigger than the max delay 259200000ms; "
                 "or if set del msg, the delay time should be bigger than the current time")


@pytest.fixture(scope="module", params=["ferrymq", "apache-5.3.1"])
def broker(request, rocketmq5_jars):
    """The peer under test: anything with a ``namesrv_addr`` (FerryMQ or Apache 5.3.1)."""
    return request.getfixturevalue("ferrymq" if request.param == "ferrymq" else "apache_rocketmq5")


def test_timer_setters_are_delivered_on_time_and_an_overlong_delay_is_refused(broker):
    topic, group = unique_names("Timer5")
    events = run_java_client(
        ["--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
         "--timers", ",".join(f"{setter}:{delay}" for setter, delay in TIMERS.items()),
         "--refuse-sec", TIMER_MAX_DELAY_SEC + 3600, "--timeout-ms", 60000],
        timeout=120, main=TIMERS_MAIN, version=ROCKETMQ5_VERSION)

    refused = [(e["code"], e["remark"]) for e in events.of("send_failed")]
    assert refused == [(MESSAGE_ILLEGAL, APACHE_REMARK)]

    sent = {e["setter"]: e for e in events.of("sent") if e["setter"] in TIMERS}
    assert sorted(sent) == sorted(TIMERS) and all(e["sendStatus"] == "SEND_OK" for e in sent.values())
    received = {}
    for e in events.of("received"):
        assert e["key"] not in received, f"delivered twice: {e}"
        received[e["key"]] = e
    for setter, s in sent.items():
        r = received.get(s["key"])
        assert r is not None, f"{setter}: never delivered ({events.done})"
        assert r["topic"] == topic
        # the broker's due time lies in [dueFromMs, dueToMs] (the send's round trip)
        assert r["receivedAtMs"] >= s["dueFromMs"], f"{setter}: {s['dueFromMs'] - r['receivedAtMs']} ms early"
        assert r["receivedAtMs"] <= s["dueToMs"] + LATE_BOUND_MS, \
            f"{setter}: {r['receivedAtMs'] - s['dueToMs']} ms late"
    assert not any(k.startswith("refused-") for k in received), "the refused message was delivered"
    for setter, s in sent.items():
        # what the delivered message says of its timer, alike on both (Apache 5.3.1 as observed here)
        values = received[s["key"]]["timerValues"]
        assert sorted(values) == sorted({SETTER_PROPERTY[setter], "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
                                         "TIMER_DEQUEUE_MS"}), (setter, values)
        # Apache files the enqueue time rounded down to its precision (1 s), FerryMQ exactly
        assert s["sentAtMs"] - 1000 <= int(values["TIMER_ENQUEUE_MS"]) <= int(values["TIMER_DEQUEUE_MS"]) \
            <= received[s["key"]]["receivedAtMs"], (setter, s, values)
        assert s["dueFromMs"] - 1000 <= int(values["TIMER_OUT_MS"]) <= s["dueToMs"], (setter, s, values)


async def enable_recall(broker) -> None:
    async with AdminClient(namesrv_addr=broker.namesrv_addr) as admin:
        await admin.update_broker_config(broker.broker_addr, {"recallMessageEnable": "true"})


RECALL_DELAY_MS = 8000
REQUEST_CODE_NOT_SUPPORTED = 3
ILLEGAL_OPERATION = 604
# what each peer answers RECALL_MESSAGE (370) with a malformed handle: Apache 5.3.1 predates
# recall (5.3.2 added it); FerryMQ answers as 5.3.2's RecallMessageProcessor does
RECALL_RAW = {"ferrymq": (ILLEGAL_OPERATION, "recall handle is invalid"),
              "apache-5.3.1": (REQUEST_CODE_NOT_SUPPORTED, None)}


def test_a_timer_recalled_by_a_marker_is_not_delivered_and_its_neighbour_is(broker, request):
    """Two timers due together on one queue; a 5.3.1 producer recalls the first with a marker
    message (TIMER_DEL_UNIQKEY, the same delivery time): the consumer gets only the second, on
    both brokers. RECALL_MESSAGE itself is 5.3.2's: each peer's answer to a malformed handle."""
    peer = request.node.callspec.params["broker"]
    topic, group = unique_names("Recall5")
    if peer == "ferrymq":  # recallMessageEnable is off by default, as in Apache 5.3.2; a live setting
        asyncio.run(enable_recall(broker))
    events = run_java_client(
        ["--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group, "--timers", "",
         "--recall", RECALL_DELAY_MS, "--timeout-ms", 60000],
        timeout=120, main=TIMERS_MAIN, version=ROCKETMQ5_VERSION)

    sent = {e["setter"]: e for e in events.of("sent") if e["setter"] in ("recalled", "kept")}
    assert sorted(sent) == ["kept", "recalled"] and all(e["sendStatus"] == "SEND_OK" for e in sent.values())
    assert [e["sendStatus"] for e in events.of("recall_marker")] == ["SEND_OK"]
    received = [e["key"] for e in events.of("received") if not e["key"].startswith("ready-")]
    assert received == [sent["kept"]["key"]], f"recalled or marker delivered, or kept missing: {received}"
    kept = next(e for e in events.of("received") if e["key"] == sent["kept"]["key"])
    assert kept["receivedAtMs"] >= sent["kept"]["dueFromMs"]

    code, remark = RECALL_RAW[peer]
    raw = events.of("recall_raw")[0]
    assert raw["code"] == code
    if remark is not None:
        assert raw["remark"] == remark


BATCH_TIMERS = "sec:3,ms:3500,deliver:4200"
# Apache 5.3's remark for a batch it refuses in CommitLog.asyncPutMessages (a delay level on the
# batch itself), as its broker answered in this test
APACHE_BATCH_REMARK = ("the message is illegal, maybe msg body or properties length not matched. "
                       "msg body length limit 4194304B, msg properties length limit 32KB.")


def test_timers_and_delay_levels_on_the_messages_of_a_batch(broker, request):
    """Batches (SEND_BATCH_MESSAGE) from the 5.3.1 client (docs/timers.md#batches).

    Alike on both brokers: a batch whose messages carry the 5.x setters is accepted, its plain
    message delivered; a batch with a delay level on the batch itself is refused, MESSAGE_ILLEGAL
    with Apache's remark.

    Where FerryMQ deliberately differs: Apache 5.3.1 applies timers and delay levels only to
    single sends (its HookUtils hook skips batches), so it stores a batch's messages as sent and
    delivers them at once, their TIMER_* / DELAY properties still on them, and it accepts a
    batch holding a delay past timerMaxDelaySec. FerryMQ drops nothing silently: each timed
    message waits as a single send would (delivered not before its time, with the timer's
    properties as a single send's),
    a message with a delay level (a batch built by hand: the client refuses one in
    send(Collection)) waits for its level, and the batch with the overlong delay is refused whole
    with the single send's code and remark."""
    peer = request.node.callspec.params["broker"]
    topic, group = unique_names("Batch5")
    events = run_java_client(
        ["--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group, "--timers", "",
         "--batch", BATCH_TIMERS, "--refuse-sec", TIMER_MAX_DELAY_SEC + 3600, "--timeout-ms", 60000],
        timeout=120, main=TIMERS_MAIN, version=ROCKETMQ5_VERSION)

    outcome = {e["setter"]: e for e in events.of("sent") + events.of("send_failed") if "keys" in e}
    assert outcome["batch-timers"]["sendStatus"] == "SEND_OK"
    assert (outcome["batch-on-batch"]["code"], outcome["batch-on-batch"]["remark"]) == (
        MESSAGE_ILLEGAL, APACHE_BATCH_REMARK)
    received = {}
    for e in events.of("received"):
        assert e["key"] not in received, f"delivered twice: {e}"
        received[e["key"]] = e
    assert not set(outcome["batch-on-batch"]["keys"]) & set(received)
    timers = [e for e in events.of("sent") if e["setter"] == "batch-timer"]
    assert len(timers) == 3
    plain, level = outcome["batch-timers"]["keys"][0], outcome["batch-level"]["keys"][1]
    assert received[plain]["timerProps"] == []

    if peer == "apache-5.3.1":  # stored as sent: the properties ride along, nothing waited
        for t in timers:
            assert received[t["key"]]["timerProps"] != [], t
        assert outcome["batch-far"]["sendStatus"] == "SEND_OK"
        assert all(k in received for k in outcome["batch-far"]["keys"])
        assert received[level]["timerProps"] == ["DELAY"]
        return
    for t in timers:  # each waited as a single send's timer: not before its time
        r = received[t["key"]]
        assert r["receivedAtMs"] >= t["dueFromMs"] and "TIMER_DEQUEUE_MS" in r["timerValues"], (t, r)
    assert (outcome["batch-far"]["code"], outcome["batch-far"]["remark"]) == (MESSAGE_ILLEGAL, APACHE_REMARK)
    assert not set(outcome["batch-far"]["keys"]) & set(received)
    level_due = next(e for e in events.of("sent") if e["setter"] == "batch-level-2")["dueFromMs"]
    assert received[level]["receivedAtMs"] >= level_due
    assert outcome["batch-level"]["sendStatus"] == "SEND_OK"
