"""POP consumption (RocketMQ 5's ReceiveMessage / Ack / ChangeInvisibleDuration) on a real broker.

The broker runs in-process (name server and broker on 127.0.0.1, real store files); messages
are produced through the Python client and consumed through the broker's PopService, the
object the gRPC endpoint calls. Restarts reopen the same data directory, so what comes back
is what the journal and the store kept.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest
from prometheus_client import generate_latest

from ferrymq.broker.pop import AckStatus, PopStatus
from ferrymq.broker.pop.admission import MAX_BATCH
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue, SubscriptionGroupConfig, dlq_topic
from ferrymq.remoting.codes import ResponseCode
from tests.consumer_support import Recorder, create_topic, produce, read_all
from testkit.processes import REPO
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


def keys_of(popped) -> list[str]:
    return [p.message.keys[0] for p in popped]


async def receive_all(pop, group: str, topic: str, want: int, *, invisible_ms: int = 60_000, timeout: float = 20.0,
                      **kw) -> list:
    """Receive until ``want`` messages came (each receive long-polls), or fail at ``timeout``."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"received {len(got)} of {want}: {keys_of(got)}"
        r = await pop.receive(group=group, topic=topic, max_messages=min(MAX_BATCH, want - len(got)),
                              invisible_ms=invisible_ms, poll_ms=int(min(remaining, 5) * 1000), **kw)
        assert r.status in (PopStatus.FOUND, PopStatus.NO_NEW_MSG), r
        got += r.messages
    return got


async def set_group(namesrv: str, group: str, **settings) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.update_group(SubscriptionGroupConfig(group_name=group, **settings))


async def test_receive_ack_and_progress(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopBasic", 4)
    sent = await produce(ns, "PopBasic", 20)
    got = await receive_all(pop, "pop-g", "PopBasic", 20, client_id="client-a@host")
    assert pop.receivers.clients("pop-g") == {"client-a@host": "PopBasic"}
    assert sorted(keys_of(got)) == sorted(f"k-{i}" for i in range(20)), "every message once"
    assert {p.message.queue_id for p in got} == {0, 1, 2, 3}, "from every queue"
    assert all(p.delivery_attempt == 1 and p.message.reconsume_times == 0 for p in got)
    assert all(p.receipt_handle.isascii() and p.invisible_until_ms > time.time() * 1000 for p in got)
    assert {p.message.msg_id for p in got} == {s.offset_msg_id for s in sent}, "the stored messages, as pulls see them"
    assert all(p.message.body.startswith(p.message.keys[0].encode()) for p in got)

    # nothing more while all 20 are invisible
    r = await pop.receive(group="pop-g", topic="PopBasic", max_messages=32, invisible_ms=60_000, poll_ms=0)
    assert r.status is PopStatus.NO_NEW_MSG and r.messages == []
    lag = pop.lag("pop-g", "PopBasic")
    assert sum(q["in_flight"] for q in lag.values()) == 20 and sum(q["not_received"] for q in lag.values()) == 0

    async with AdminClient(namesrv_addr=ns) as admin:
        before = await admin.consume_stats("pop-g", topic="PopBasic")
        assert before.total_lag() == 20, "received but unacked messages are not consumed yet"
        for p in got[:15]:
            assert await pop.ack(group="pop-g", topic="PopBasic", receipt_handle=p.receipt_handle) is AckStatus.OK
        # a second ack of the same handle changes nothing and is not an error
        assert await pop.ack(group="pop-g", topic="PopBasic", receipt_handle=got[0].receipt_handle) is AckStatus.OK
        for p in got[15:]:
            assert await pop.ack(group="pop-g", topic="PopBasic", receipt_handle=p.receipt_handle) is AckStatus.OK
        after = await admin.consume_stats("pop-g", topic="PopBasic")
        assert after.total_lag() == 0, "acked: the POP consume offsets reached the queues' ends"
    assert all(q["in_flight"] == 0 for q in pop.lag("pop-g", "PopBasic").values())


async def test_held_receive_is_woken_by_an_arrival(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopWake", 2)
    held = asyncio.create_task(pop.receive(group="wake-g", topic="PopWake", max_messages=4, invisible_ms=30_000,
                                           poll_ms=20_000))
    await wait_until(lambda: pop.waiting == 1, 5, "the receive held by long polling")
    started = time.monotonic()
    await produce(ns, "PopWake", 1, prefix="late")
    r = await held
    assert r.status is PopStatus.FOUND and keys_of(r.messages) == ["late-0"]
    assert time.monotonic() - started < 5, "an arrival, not the 20 s poll time, answered the receive"


async def test_unacked_message_comes_back_after_its_invisible_time_with_attempt_raised(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopRedeliver", 1)
    await produce(ns, "PopRedeliver", 1)
    [first] = (await pop.receive(group="re-g", topic="PopRedeliver", max_messages=1, invisible_ms=600,
                                 poll_ms=0)).messages
    r = await pop.receive(group="re-g", topic="PopRedeliver", max_messages=1, invisible_ms=600, poll_ms=0)
    assert r.status is PopStatus.NO_NEW_MSG, "invisible for now"
    r = await pop.receive(group="re-g", topic="PopRedeliver", max_messages=1, invisible_ms=60_000, poll_ms=10_000)
    [again] = r.messages
    assert again.message.msg_id == first.message.msg_id
    assert (again.delivery_attempt, again.message.reconsume_times) == (2, 1)
    assert again.receipt_handle != first.receipt_handle
    # the first delivery's handle is out of date now; the new one acks
    assert await pop.ack(group="re-g", topic="PopRedeliver", receipt_handle=first.receipt_handle) is AckStatus.EXPIRED
    assert await pop.ack(group="re-g", topic="PopRedeliver", receipt_handle=again.receipt_handle) is AckStatus.OK
    r = await pop.receive(group="re-g", topic="PopRedeliver", max_messages=1, invisible_ms=600, poll_ms=1500)
    assert r.status is PopStatus.NO_NEW_MSG, "acked: never again"


async def test_change_invisible_moves_the_deadline_and_replaces_the_handle(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopChange", 1)
    await produce(ns, "PopChange", 2)
    a, b = (await pop.receive(group="ch-g", topic="PopChange", max_messages=2, invisible_ms=500, poll_ms=0)).messages
    status, a2 = await pop.change_invisible(group="ch-g", topic="PopChange", receipt_handle=a.receipt_handle,
                                            invisible_ms=60_000)
    assert status is AckStatus.OK and a2 and a2 != a.receipt_handle
    # b's 500 ms pass: b comes back, a (extended to 60 s) does not
    r = await pop.receive(group="ch-g", topic="PopChange", max_messages=2, invisible_ms=60_000, poll_ms=5_000)
    assert keys_of(r.messages) == [b.message.keys[0]] and r.messages[0].delivery_attempt == 2
    assert await pop.ack(group="ch-g", topic="PopChange", receipt_handle=a.receipt_handle) is AckStatus.EXPIRED
    status, none = await pop.change_invisible(group="ch-g", topic="PopChange", receipt_handle=a.receipt_handle,
                                              invisible_ms=1000)
    assert (status, none) == (AckStatus.EXPIRED, None)
    # 0: visible again at once (a negative acknowledgement), delivered by the next receive
    status, a3 = await pop.change_invisible(group="ch-g", topic="PopChange", receipt_handle=a2, invisible_ms=0)
    assert status is AckStatus.OK
    r = await pop.receive(group="ch-g", topic="PopChange", max_messages=2, invisible_ms=60_000, poll_ms=5_000)
    assert keys_of(r.messages) == [a.message.keys[0]]
    assert r.messages[0].delivery_attempt == 2, "a change of invisible time is not a delivery"
    with pytest.raises(ValueError, match="out of range"):
        await pop.change_invisible(group="ch-g", topic="PopChange", receipt_handle=r.messages[0].receipt_handle,
                                   invisible_ms=-1)


async def test_message_goes_to_the_dlq_after_max_attempts(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopDead", 1)
    await set_group(ns, "dead-g", retry_max_times=2)  # 1 delivery + 2 redeliveries
    await produce(ns, "PopDead", 1, prefix="poison")
    attempts = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = await pop.receive(group="dead-g", topic="PopDead", max_messages=1, invisible_ms=300, poll_ms=1500)
        attempts += [p.delivery_attempt for p in r.messages]
        if r.status is PopStatus.NO_NEW_MSG and len(attempts) >= 3:
            break
    assert attempts == [1, 2, 3]
    dead = []

    async def dead_lettered() -> bool:
        dead[:] = await read_all(ns, dlq_topic("dead-g"))
        return bool(dead)

    await wait_until(dead_lettered, 20, "the message in the group's DLQ", interval=0.2)
    assert [(m.keys[0], m.reconsume_times) for m in dead] == [("poison-0", 3)], "the DLQ copy tells its deliveries"
    assert all(q["in_flight"] == 0 and q["visible_again"] == 0 for q in pop.lag("dead-g", "PopDead").values())
    text = generate_latest(cluster.broker.metrics_registry).decode()
    assert "ferrymq_broker_pop_dead_lettered_total" in text and _metric(text, "ferrymq_broker_pop_dead_lettered_total") == 1


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_fifo_group_holds_a_queue_until_its_message_is_acked(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopFifo", 2)
    await set_group(ns, "fifo-g", consume_message_orderly=True)
    async with Producer("fifo-producer", namesrv_addr=ns) as producer:
        for i in range(3):
            m = Message("PopFifo", f"q0-{i}".encode())
            m.keys = [f"q0-{i}"]
            await producer.send(m, queue=MessageQueue("PopFifo", cluster.broker.config.broker_name, 0))
        m = Message("PopFifo", b"q1-0")
        m.keys = ["q1-0"]
        await producer.send(m, queue=MessageQueue("PopFifo", cluster.broker.config.broker_name, 1))

    async def receive(invisible_ms=60_000, poll_ms=0):
        return await pop.receive(group="fifo-g", topic="PopFifo", queue_id=0, max_messages=1,
                                 invisible_ms=invisible_ms, poll_ms=poll_ms)

    [m0] = (await receive()).messages
    assert m0.message.keys == ["q0-0"]
    assert (await receive()).status is PopStatus.NO_NEW_MSG, "q0-1 waits while q0-0 is out"
    # another queue of the same group is not held up
    other = await pop.receive(group="fifo-g", topic="PopFifo", queue_id=1, max_messages=1, invisible_ms=60_000,
                              poll_ms=0)
    assert keys_of(other.messages) == ["q1-0"]
    # a held receive is answered by the ack that frees the queue
    held = asyncio.create_task(receive(invisible_ms=500, poll_ms=10_000))
    await wait_until(lambda: pop.waiting == 1, 5, "the receive held")
    assert await pop.ack(group="fifo-g", topic="PopFifo", receipt_handle=m0.receipt_handle) is AckStatus.OK
    [m1] = (await held).messages
    assert m1.message.keys == ["q0-1"]
    # not acked: after its invisible time the same message comes again, not q0-2
    [again] = (await receive(poll_ms=10_000)).messages
    assert again.message.keys == ["q0-1"] and again.delivery_attempt == 2
    assert await pop.ack(group="fifo-g", topic="PopFifo", receipt_handle=again.receipt_handle) is AckStatus.OK
    [m2] = (await receive()).messages
    assert m2.message.keys == ["q0-2"]


async def test_pop_and_classic_consumers_of_one_group_are_refused(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopOwner", 2)
    await produce(ns, "PopOwner", 4)
    # a group consuming by POP: its classic pull is refused
    assert (await pop.receive(group="own-g", topic="PopOwner", max_messages=1, invisible_ms=60_000,
                              poll_ms=0)).status is PopStatus.FOUND
    async with PullConsumer("own-g", namesrv_addr=ns) as pc:
        [mq, *_] = await pc.fetch_queues("PopOwner")
        with pytest.raises(MQBrokerError) as refused:
            await pc.pull(mq, 0)
        assert refused.value.code == ResponseCode.NO_PERMISSION and "POP" in refused.value.remark
    # the other way: a push consumer online in a group, whose POP receive is then refused
    consumer = PushConsumer("classic-g", namesrv_addr=ns)
    consumer.subscribe("PopOwner", "*")
    rec = Recorder()
    consumer.register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await wait_until(lambda: len(rec.keys()) == 4, 20, "the push consumer's messages")
        r = await pop.receive(group="classic-g", topic="PopOwner", max_messages=1, invisible_ms=60_000, poll_ms=0)
        assert r.status is PopStatus.REFUSED and r.refused_code == ResponseCode.NO_PERMISSION
        assert "classic" in r.remark and "classic-g" in r.remark
    finally:
        await consumer.shutdown()


async def test_bad_input_is_answered_clearly(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopBad", 1)
    await produce(ns, "PopBad", 1)

    async def refused(**kw) -> str:
        args = dict(group="bad-g", topic="PopBad", max_messages=1, invisible_ms=1000, poll_ms=0) | kw
        r = await pop.receive(**args)
        assert r.status is PopStatus.REFUSED and r.messages == [] and r.refused_code, r
        return r.remark

    assert "invisible time 0 ms out of range" in await refused(invisible_ms=0)
    assert "invisible time -5 ms out of range" in await refused(invisible_ms=-5)
    assert "max messages 1000 out of range: 1..32" in await refused(max_messages=1000)
    assert "max messages 0 out of range" in await refused(max_messages=0)
    assert "poll time -1 ms" in await refused(poll_ms=-1)
    assert "topic[NoSuchTopic] not exist" in await refused(topic="NoSuchTopic")
    assert "queueId[7] is illegal" in await refused(queue_id=7)

    [p] = (await pop.receive(group="bad-g", topic="PopBad", max_messages=1, invisible_ms=60_000, poll_ms=0)).messages
    h = p.receipt_handle
    for handle in ("", "garbage", "1.x.y", "2" + h[1:], h[:-3], h.replace(".", ",", 2), "é" * 10, h + "x" * 600):
        assert await pop.ack(group="bad-g", topic="PopBad", receipt_handle=handle) is AckStatus.INVALID_HANDLE, handle
        status, new = await pop.change_invisible(group="bad-g", topic="PopBad", receipt_handle=handle, invisible_ms=1)
        assert (status, new) == (AckStatus.INVALID_HANDLE, None), handle
    # another group's or topic's handle is not this one's
    assert await pop.ack(group="other-g", topic="PopBad", receipt_handle=h) is AckStatus.INVALID_HANDLE
    # a well-formed handle this broker never issued (the message's next offset, a seq never used)
    parts = h.split(".")
    from ferrymq.broker.pop.receipt import Receipt
    forged = Receipt(0, int(parts[2]) + 1, int(parts[3]), 1, 10**9, int(parts[6]), parts[8]).encode("bad-g", "PopBad")
    assert await pop.ack(group="bad-g", topic="PopBad", receipt_handle=forged) is AckStatus.INVALID_HANDLE
    assert await pop.ack(group="bad-g", topic="PopBad", receipt_handle=h) is AckStatus.OK
    text = generate_latest(cluster.broker.metrics_registry).decode()
    assert _metric(text, "ferrymq_broker_pop_handles_refused_total") >= 18
    assert _metric(text, "ferrymq_broker_pop_acks_total") == 1


async def test_acks_and_in_flight_messages_survive_a_restart(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "PopRestart", 4)
    await produce(ns, "PopRestart", 12)
    pop = cluster.broker.pop
    got = await receive_all(pop, "rs-g", "PopRestart", 12, invisible_ms=1500)
    acked = {p.message.keys[0] for p in got[::2]}
    for p in got[::2]:
        assert await pop.ack(group="rs-g", topic="PopRestart", receipt_handle=p.receipt_handle) is AckStatus.OK
    unacked = {p.message.keys[0] for p in got} - acked
    handles = {p.message.keys[0]: p.receipt_handle for p in got}

    await cluster.restart_broker()
    pop = cluster.broker.pop
    lag = pop.lag("rs-g", "PopRestart")
    assert sum(q["in_flight"] + q["visible_again"] for q in lag.values()) == 6, lag
    # an acked message's handle still answers OK; an unacked one's still acks (not redelivered yet)
    one = sorted(unacked)[0]
    assert await pop.ack(group="rs-g", topic="PopRestart", receipt_handle=handles[one]) is AckStatus.OK
    unacked.discard(one)
    await produce(ns, "PopRestart", 2, prefix="new")
    back = await receive_all(pop, "rs-g", "PopRestart", 7)
    assert sorted(keys_of(back)) == sorted(unacked | {"new-0", "new-1"})
    assert all(p.delivery_attempt == (1 if p.message.keys[0].startswith("new") else 2) for p in back)


async def test_concurrent_receivers_share_the_messages_without_duplicates(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopShare", 4)
    await produce(ns, "PopShare", 300)
    seen: list[str] = []
    per_worker: list[int] = [0] * 6

    async def worker(n: int) -> None:
        while len(seen) < 300:
            r = await pop.receive(group="share-g", topic="PopShare", max_messages=7, invisible_ms=60_000, poll_ms=500)
            for p in r.messages:
                seen.append(p.message.keys[0])
                per_worker[n] += 1
                assert await pop.ack(group="share-g", topic="PopShare", receipt_handle=p.receipt_handle) is AckStatus.OK
            if not r.messages and len(seen) >= 300:
                return

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(6))), 60)
    assert len(seen) == 300 and len(set(seen)) == 300, "each message delivered once"
    assert sum(1 for n in per_worker if n) >= 2, f"receivers shared the work: {per_worker}"
    text = generate_latest(cluster.broker.metrics_registry).decode()
    assert _metric(text, "ferrymq_broker_pop_messages_received_total") == 300
    assert _metric(text, "ferrymq_broker_pop_acks_total") == 300
    assert 'ferrymq_broker_pop_in_flight_messages{broker="broker-a",cluster="DefaultCluster",group="share-g",' \
           'state="invisible",topic="PopShare"} 0.0' in text


async def test_fifo_queue_moves_on_after_its_head_message_is_dead_lettered(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopFifoDead", 1)
    await set_group(ns, "fifo-dead-g", consume_message_orderly=True, retry_max_times=1)
    await produce(ns, "PopFifoDead", 2)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "k-1" not in seen:
        r = await pop.receive(group="fifo-dead-g", topic="PopFifoDead", max_messages=1, invisible_ms=300,
                              poll_ms=2000)
        seen += [f"{p.message.keys[0]}#{p.delivery_attempt}" if p.message.keys[0] == "k-0" else p.message.keys[0]
                 for p in r.messages]
    assert seen == ["k-0#1", "k-0#2", "k-1"], "k-0 twice (1 + retryMaxTimes), then the DLQ, then the next in order"
    await wait_until(lambda: cluster.broker.pop.counters.dead_lettered == 1, 10, "k-0 dead-lettered")


async def test_shutdown_answers_held_receives(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopStop", 1)
    held = asyncio.create_task(pop.receive(group="stop-g", topic="PopStop", max_messages=1, invisible_ms=1000,
                                           poll_ms=60_000))
    await wait_until(lambda: pop.waiting == 1, 5, "the receive held")
    started = time.monotonic()
    await cluster.restart_broker()
    r = await asyncio.wait_for(held, 10)
    assert r.status is PopStatus.NO_NEW_MSG and time.monotonic() - started < 10
    r = await pop.receive(group="stop-g", topic="PopStop", max_messages=1, invisible_ms=1000, poll_ms=0)
    assert r.status is PopStatus.REFUSED and "not running" in r.remark, "the stopped broker's service refuses"


async def group_progress(ns: str, group: str) -> dict:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "ferrymq.cli.main", "admin", "group", "progress",
                                                group, "-n", ns, "--json", cwd=REPO, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def test_admin_group_progress_shows_a_pop_groups_lag(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopProgress", 1)
    await produce(ns, "PopProgress", 6)
    got = (await pop.receive(group="prog-g", topic="PopProgress", max_messages=6, invisible_ms=60_000,
                             poll_ms=0)).messages
    assert [p.message.queue_offset for p in got] == list(range(6))
    assert (await group_progress(ns, "prog-g"))["totalLag"] == 6, "received is not consumed"

    async def ack(i: int) -> None:
        assert await pop.ack(group="prog-g", topic="PopProgress", receipt_handle=got[i].receipt_handle) is AckStatus.OK

    for i in (0, 1, 2, 4):
        await ack(i)
    [queue] = (await group_progress(ns, "prog-g"))["queues"]
    assert (queue["consumerOffset"], queue["lag"]) == (3, 3), "the offset stops at the first unacked message (3)"
    await ack(3)
    [queue] = (await group_progress(ns, "prog-g"))["queues"]
    assert (queue["consumerOffset"], queue["lag"]) == (5, 1)


async def test_a_group_that_consumed_classically_continues_from_its_offset(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopSwitch", 1)
    await produce(ns, "PopSwitch", 5)
    async with PullConsumer("switch-g", namesrv_addr=ns) as pc:
        [mq] = await pc.fetch_queues("PopSwitch")
        await pc.commit(mq, 3)  # consumed 0..2 classically
    r = await pop.receive(group="switch-g", topic="PopSwitch", max_messages=32, invisible_ms=60_000, poll_ms=0)
    assert keys_of(r.messages) == ["k-3", "k-4"]


async def test_long_polling_slots_full(cluster):
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopFull", 1)
    pop.max_polling = 1
    held = asyncio.create_task(pop.receive(group="full-g", topic="PopFull", max_messages=1, invisible_ms=1000,
                                           poll_ms=30_000))
    await wait_until(lambda: pop.waiting == 1, 5, "the first receive held")
    r = await pop.receive(group="full-g", topic="PopFull", max_messages=1, invisible_ms=1000, poll_ms=5_000)
    assert r.status is PopStatus.POLLING_FULL and "already held" in r.remark
    r = await pop.receive(group="full-g", topic="PopFull", max_messages=1, invisible_ms=1000, poll_ms=0)
    assert r.status is PopStatus.NO_NEW_MSG, "a receive that does not wait is answered as usual"
    await produce(ns, "PopFull", 1)
    assert (await held).status is PopStatus.FOUND


async def test_deadline_heap_does_not_keep_acked_messages(cluster, monkeypatch):
    from ferrymq.broker.pop import revival
    monkeypatch.setattr(revival, "REBUILD_EVERY", 64)
    ns, pop = cluster.namesrv_addr, cluster.broker.pop
    await create_topic(ns, "PopHeap", 2)
    await produce(ns, "PopHeap", 400)
    got = await receive_all(pop, "heap-g", "PopHeap", 400, invisible_ms=3_600_000)  # an hour: no deadline passes
    for p in got[:390]:
        assert await pop.ack(group="heap-g", topic="PopHeap", receipt_handle=p.receipt_handle) is AckStatus.OK
    await produce(ns, "PopHeap", 100, prefix="more")
    more = await receive_all(pop, "heap-g", "PopHeap", 100, invisible_ms=3_600_000)
    assert len(more) == 100
    assert pop.scheduled_deadlines < 250, "rebuilt from the live entries (110), not one entry per delivery (500)"


async def test_admin_group_create_fifo(cluster):
    ns = cluster.namesrv_addr
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "ferrymq.cli.main", "admin", "group", "create",
                                                "cli-fifo-g", "--fifo", "-n", ns, "--json", cwd=REPO,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["consume_message_orderly"] is True
    assert cluster.broker.groups.get("cli-fifo-g").consume_message_orderly


async def test_a_promoted_broker_continues_from_the_offsets_its_master_synced(cluster):
    """What a slave promoted by failover does: its own POP state for a queue is older than the
    consume offset the previous master synced to it, so it continues from that offset."""
    ns, pop, broker = cluster.namesrv_addr, cluster.broker.pop, cluster.broker
    await create_topic(ns, "PopPromote", 1)
    await produce(ns, "PopPromote", 8)
    got = (await pop.receive(group="pro-g", topic="PopPromote", max_messages=4, invisible_ms=300,
                             poll_ms=0)).messages
    assert keys_of(got) == ["k-0", "k-1", "k-2", "k-3"]
    broker.offsets.commit("pro-g", "PopPromote", 0, 6)  # as the slave sync would: the other master acked 0..5
    pop.adopt_synced_offsets()
    r = await pop.receive(group="pro-g", topic="PopPromote", max_messages=8, invisible_ms=60_000, poll_ms=2000)
    assert keys_of(r.messages) == ["k-6", "k-7"], "nothing below 6 again, in flight here or not"
    await cluster.restart_broker()
    pop = cluster.broker.pop
    assert pop.lag("pro-g", "PopPromote")[0]["consume_offset"] == 6, "the adoption was journaled"
    r = await pop.receive(group="pro-g", topic="PopPromote", max_messages=8, invisible_ms=60_000, poll_ms=300)
    assert r.messages == []
