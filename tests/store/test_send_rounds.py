"""The sends of one read from a connection are written together (store/asyncio_store.py's
dispatch rounds): each still gets its own answer, in order, with the offsets it would get
alone, and a send that cannot join the round never overtakes one that did."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.eager import start_eagerly
from ferrymq.common.message import Message, MessageExt, decode_records
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from ferrymq.remoting.request_headers import SendMessageHeader
from ferrymq.store import MessageStore, PutStatus, StoreConfig
from ferrymq.store.asyncio_store import AsyncMessageStore
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration


def send_frame(opaque: int, topic: str, queue_id: int, body: bytes) -> bytes:
    header = SendMessageHeader("p", topic, queue_id=queue_id, born_timestamp=1_700_000_000_000)
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(), body=body)
    request.opaque = opaque
    return encode_frame(request)


async def burst(addr: str, sends: list[tuple[str, int, bytes]]) -> list[RemotingCommand]:
    """All ``sends`` in one socket write; the answers, by opaque."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"".join(send_frame(i + 1, *s) for i, s in enumerate(sends)))
        decoder, answers = FrameDecoder(16 * 1024 * 1024), {}
        while len(answers) < len(sends):
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the broker closed the connection"
            answers.update((c.opaque, c) for c in decoder.feed(data))
        return [answers[i + 1] for i in range(len(sends))]
    finally:
        writer.close()


async def queue_bodies(cluster, topic: str, queue_id: int) -> list[bytes]:
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        got, offset = [], 0
        while True:
            result = await consumer.pull(MessageQueue(topic, "broker-a", queue_id), offset, max_nums=32)
            if not result.messages:
                return got
            got += [m.body for m in result.messages]
            offset = result.next_begin_offset


async def make_queues(cluster, topic: str, queue_ids: range) -> None:
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        for q in queue_ids:
            await producer.send(Message(topic, b"first"), queue=MessageQueue(topic, "broker-a", q))


async def test_sends_of_one_read_are_written_together_and_answered_in_order(cluster):
    await make_queues(cluster, "Rounds", range(4))
    store = cluster.broker.ctx.store
    writes_before = store.round_writes
    sends = [("Rounds", i % 4, f"m{i}".encode()) for i in range(24)]
    answers = await burst(cluster.broker_addr, sends)
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 24
    for q in range(4):
        offsets = [int(a.ext_fields["queueOffset"]) for a, s in zip(answers, sends) if s[1] == q]
        assert offsets == list(range(1, 7))
        assert await queue_bodies(cluster, "Rounds", q) == [b"first"] + [f"m{i}".encode() for i in range(q, 24, 4)]
    assert store.round_writes > writes_before and store.round_puts >= 12  # (a read may split the burst)


async def test_a_send_that_cannot_join_the_round_does_not_overtake_one_that_did(cluster):
    """A new queue's first put goes to the writer thread; the round's puts before it are
    written first, so every queue keeps the order its sends came in."""
    await make_queues(cluster, "Mixed", range(1))
    sends = [("Mixed", 0, b"a"), ("Mixed", 0, b"b"), ("Mixed", 3, b"new"), ("Mixed", 0, b"c"), ("Mixed", 3, b"new2"),
             ("Mixed", 0, b"d")]
    answers = await burst(cluster.broker_addr, sends)
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 6
    assert await queue_bodies(cluster, "Mixed", 0) == [b"first", b"a", b"b", b"c", b"d"]
    assert await queue_bodies(cluster, "Mixed", 3) == [b"new", b"new2"]


async def test_a_refused_send_in_a_round_is_answered_and_the_others_stored(cluster):
    await make_queues(cluster, "Refusals", range(2))
    too_big = b"x" * (cluster.broker.store_config.max_message_size + 1)
    sends = [("Refusals", 0, b"ok1"), ("Refusals", 1, too_big), ("Refusals", 0, b"ok2"), ("bad topic!", 0, b"no")]
    answers = await burst(cluster.broker_addr, sends)
    assert answers[0].code == answers[2].code == ResponseCode.SUCCESS
    assert answers[1].code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in answers[1].remark
    assert answers[3].code != ResponseCode.SUCCESS and "invalid" in answers[3].remark
    assert await queue_bodies(cluster, "Refusals", 0) == [b"first", b"ok1", b"ok2"]
    assert await queue_bodies(cluster, "Refusals", 1) == [b"first"]


async def test_parked_puts_are_written_before_a_later_put_leaves_for_the_writer_thread(tmp_path):
    """The writer thread may run before the round closes (it takes the GIL when the loop lets
    it): the parked puts must already be in the CommitLog by then."""
    def msg(queue_id: int, body: bytes) -> MessageExt:
        return MessageExt("Order", body, queue_id=queue_id, born_timestamp=1, born_host=("10.0.0.1", 1))

    inner = MessageStore(StoreConfig(str(tmp_path / "store")), store_host=("127.0.0.1", 10911))
    store = AsyncMessageStore(inner)
    await store.load(("127.0.0.1", 10911))
    try:
        assert (await store.put_message(msg(0, b"first"))).status is PutStatus.PUT_OK  # queue 0 exists, 1 not
        store.open_round()
        parked: list = []
        assert start_eagerly(store.put_message(msg(0, b"a")), parked=parked) is None and len(parked) == 1
        to_new_queue = start_eagerly(store.put_message(msg(1, b"new")), parked=parked)  # the writer thread
        behind_it = start_eagerly(store.put_message(msg(0, b"b")), parked=parked)  # the thread is busy: queued too
        assert to_new_queue is not None and behind_it is not None and len(parked) == 1
        await asyncio.gather(to_new_queue, behind_it)  # the thread wins the race with the round's end
        store.close_round()
        with pytest.raises(StopIteration) as parked_put:
            parked[0].send(None)
        assert parked_put.value.value.queue_offset == 1
        got = inner.get_messages("g", "Order", 0, 0, 10)
        assert [m.body for m in decode_records(b"".join(got.records))] == [b"first", b"a", b"b"]
    finally:
        await store.shutdown()


async def test_under_sync_flush_the_sends_of_a_round_are_answered_after_the_fsync_that_covers_them(tmp_path):
    """The round's sends wait for the round's end together: each is answered SUCCESS once an
    fsync covers all of them, and every one is counted as an acknowledgement."""
    c = await InProcessCluster(tmp_path / "store", settings={"flushDiskType": "SYNC_FLUSH"}).start()
    try:
        await make_queues(c, "Durable", range(4))
        store = c.broker.ctx.store
        stats = store.group_commit_stats
        acks_before, fsyncs_before, rounds_before = stats.acks, stats.fsyncs, c.broker.ctx.store.round_writes
        sends = [("Durable", i % 4, f"d{i}".encode()) for i in range(40)]
        answers = await burst(c.broker_addr, sends)
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 40
        ends = [decode_offset_msg_id(a.ext_fields["msgId"])[2] for a in answers]
        assert store.flushed_phy_offset > max(ends)
        assert stats.acks - acks_before == 40
        assert c.broker.ctx.store.round_writes > rounds_before
        assert stats.fsyncs - fsyncs_before < 40  # shared, not one per send
        for q in range(4):
            assert await queue_bodies(c, "Durable", q) == [b"first"] + [f"d{i}".encode() for i in range(q, 40, 4)]
    finally:
        await c.stop()


async def test_puts_queued_behind_the_writer_thread_are_written_as_one_group_each_with_its_own_result(tmp_path):
    """With appends in the writer thread (a slow disk, or configured), the puts that queue up
    while it writes join one job: fewer writes than puts, each put its own offset, in the order
    they came, and a put handed over after another kind of write is written after it."""
    def msg(queue_id: int, body: bytes) -> MessageExt:
        return MessageExt("Backlog", body, queue_id=queue_id, born_timestamp=1, born_host=("10.0.0.1", 1))

    inner = MessageStore(StoreConfig(str(tmp_path / "store")), store_host=("127.0.0.1", 10911))
    store = AsyncMessageStore(inner, append_on_loop=False)
    await store.load(("127.0.0.1", 10911))
    groups: list[int] = []
    put_group = inner.put_group

    def counting_put_group(puts, **kwargs):
        groups.append(len(puts))
        return put_group(puts, **kwargs)

    inner.put_group = counting_put_group
    try:
        puts = [asyncio.ensure_future(store.put_message(msg(i % 2, b"m%d" % i))) for i in range(200)]
        later = asyncio.ensure_future(store.put_group([msg(0, b"group")]))  # not a send: closes the queued job
        after = asyncio.ensure_future(store.put_message(msg(0, b"after")))
        results = await asyncio.gather(*puts)
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert [r.queue_offset for r in results[0::2]] == list(range(100))
        assert [r.queue_offset for r in results[1::2]] == list(range(100))
        assert (await later)[0].queue_offset == 100 and (await after).queue_offset == 101
        assert sum(groups) == 202 and len(groups) < 50, groups
        bodies: list[bytes] = []
        while len(bodies) < 102:
            got = inner.get_messages("g", "Backlog", 0, len(bodies), 32)
            assert got.records, bodies
            bodies += [m.body for m in decode_records(b"".join(got.records))]
        assert bodies == [b"m%d" % i for i in range(0, 200, 2)] + [b"group", b"after"]
    finally:
        await store.shutdown()
