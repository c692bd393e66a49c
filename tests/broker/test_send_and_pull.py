"""Send and pull through a real broker on 127.0.0.1: what a producer stores is what a
consumer gets back, byte for byte, and held pulls wake on arrival, not on a timer."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message, encode_record
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode, SerializeType
from ferrymq.remoting.command import RemotingCommand
from ferrymq.store import MessageStore
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


async def test_sent_message_is_pulled_back_byte_identical_with_keys_tags_and_properties(cluster):
    body = bytes(range(256)) * 4
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        m = Message("Orders", body, flag=7, properties={"color": "blue", "ünï": "cödé"})
        m.tags, m.keys = "TagA", ["order-1", "customer-9"]
        sent = await producer.send(m)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(sent.message_queue, sent.queue_offset)
    assert result.status is PullStatus.FOUND
    got = result.messages[0]
    assert got.body == body and got.flag == 7
    assert got.tags == "TagA" and got.keys == ["order-1", "customer-9"]
    assert got.properties["color"] == "blue" and got.properties["ünï"] == "cödé"
    assert got.client_msg_id == sent.msg_id and got.msg_id == sent.offset_msg_id
    assert (got.queue_id, got.queue_offset) == (sent.message_queue.queue_id, sent.queue_offset)
    assert got.properties["CLUSTER"] == "DefaultCluster"


@pytest.mark.parametrize("code", [RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE])
async def test_pull_body_is_exactly_the_stored_record(cluster, code):
    """The pull body is the raw CommitLog record: re-encoding the decoded message gives the same bytes.
    RocketMQ 5's lite pull consumer asks the same with LITE_PULL_MESSAGE."""
    topic = f"Raw{int(code)}"
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        sent = await producer.send(Message(topic, b"payload", properties={"k": "v"}))
    client = RemotingClient()
    try:
        response = await client.invoke(cluster.broker_addr, RemotingCommand.request(code, {
            "consumerGroup": "g", "topic": topic, "queueId": sent.message_queue.queue_id, "queueOffset": 0,
            "maxMsgNums": 1, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
            "subVersion": 0}))
    finally:
        await client.close()
    assert response.code == ResponseCode.SUCCESS and response.remark == "FOUND"
    from ferrymq.common.message import decode_record
    decoded, end = decode_record(response.body)
    assert end == len(response.body)
    assert encode_record(decoded) == response.body


async def test_batch_send_gets_consecutive_offsets_and_every_message_comes_back(cluster):
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        mq = MessageQueue("Batch", "broker-a", 0)
        first = await producer.send_batch([Message("Batch", f"m{i}".encode()) for i in range(3)], queue=mq)
        second = await producer.send_batch([Message("Batch", f"n{i}".encode()) for i in range(32)], queue=mq)
    assert (first.queue_offset, second.queue_offset) == (0, 3)
    assert len(second.offset_msg_id.split(",")) == 32 and len(second.msg_id.split(",")) == 32
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        got = []
        offset = 0
        while offset < 35:
            result = await consumer.pull(mq, offset, max_nums=32)
            got += [m.body for m in result.messages]
            offset = result.next_begin_offset
    assert got == [f"m{i}".encode() for i in range(3)] + [f"n{i}".encode() for i in range(32)]


async def test_async_and_oneway_sends_are_stored(cluster):
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("Modes", b"warm-up"))  # route known
        results = await asyncio.gather(*(producer.send_async(Message("Modes", f"a{i}".encode())) for i in range(50)))
        for i in range(10):
            await producer.send_oneway(Message("Modes", f"o{i}".encode()))
    assert len({(r.message_queue.queue_id, r.queue_offset) for r in results}) == 50
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        bodies = set()
        deadline = time.monotonic() + 10
        while len(bodies) < 61 and time.monotonic() < deadline:
            bodies = set()
            for mq in await consumer.fetch_queues("Modes"):
                result = await consumer.pull(mq, 0, max_nums=64)
                bodies |= {m.body for m in result.messages}
    assert bodies == {b"warm-up"} | {f"a{i}".encode() for i in range(50)} | {f"o{i}".encode() for i in range(10)}


async def test_held_pull_is_answered_as_soon_as_a_message_arrives(cluster):
    mq = MessageQueue("Hold", "broker-a", 0)
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer, \
            PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        await producer.send(Message("Hold", b"first"), queue=mq)
        pull = asyncio.create_task(consumer.pull(mq, 1, suspend=10.0))
        await wait_until(lambda: cluster.broker.pull_waiters.held == 1)
        await producer.send(Message("Hold", b"second"), queue=mq)
        sent_at = time.monotonic()
        result = await pull
        answered_after = time.monotonic() - sent_at
    assert result.status is PullStatus.FOUND and result.messages[0].body == b"second"
    # Generous bound: a timer-driven wake-up (RocketMQ checks every 5 s) would miss it by far.
    assert answered_after < 0.05, answered_after


async def test_a_message_stored_between_the_pulls_read_and_its_hold_still_answers_it(cluster):
    """The race of issue 14: the pull reads (nothing), the message is stored and announced,
    only then does the pull start waiting. It must not wait out its suspend time."""
    mq = MessageQueue("Race", "broker-a", 0)
    store = cluster.broker.store
    read = store.get_messages
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer, \
            PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        await producer.send(Message("Race", b"first"), queue=mq)
        arrived_at: list[float] = []

        async def read_then_store(group, topic, queue_id, offset, *args):
            result = await read(group, topic, queue_id, offset, *args)
            if topic == "Race" and not arrived_at:  # the held pull's first read: store right after it
                await producer.send(Message("Race", b"second"), queue=mq)
                arrived_at.append(time.monotonic())
            return result

        store.get_messages = read_then_store  # instance attribute: only this broker's pulls
        try:
            result = await consumer.pull(mq, 1, suspend=10.0)
        finally:
            del store.get_messages
    assert result.status is PullStatus.FOUND and result.messages[0].body == b"second"
    # Without the re-check it waits out the suspend time (10 s), or RocketMQ's 5 s sweep.
    assert time.monotonic() - arrived_at[0] < 2.0


def tagged(body: bytes, tag: str) -> Message:
    m = Message("Tagged", body)
    m.tags = tag
    return m


async def test_a_held_tag_filtered_pull_is_not_woken_by_messages_it_does_not_want(cluster):
    mq = MessageQueue("Tagged", "broker-a", 0)
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer, \
            PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        await producer.send(tagged(b"first", "A"), queue=mq)
        pull = asyncio.create_task(consumer.pull(mq, 1, expression="A", suspend=10.0))
        await wait_until(lambda: cluster.broker.pull_waiters.held == 1)
        await producer.send(tagged(b"other", "B"), queue=mq)
        await asyncio.sleep(0.3)
        assert not pull.done() and cluster.broker.pull_waiters.held == 1  # a B message wakes nobody
        await producer.send(tagged(b"wanted", "A"), queue=mq)
        result = await asyncio.wait_for(pull, 5)
    assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"wanted"]


async def test_held_pull_times_out_with_pull_not_found(cluster):
    await cluster.broker.topics.persist()
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        sent = await producer.send(Message("Quiet", b"only"))
    client = RemotingClient()
    started = time.monotonic()
    try:
        response = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g", "topic": "Quiet", "queueId": sent.message_queue.queue_id, "queueOffset": 1,
            "maxMsgNums": 32, "sysFlag": 2 | 4, "commitOffset": 0, "suspendTimeoutMillis": 300, "subscription": "*",
            "subVersion": 0}), timeout=5)
    finally:
        await client.close()
    assert response.code == ResponseCode.PULL_NOT_FOUND
    assert time.monotonic() - started >= 0.3
    assert response.get_long("nextBeginOffset") == 1 and response.get_long("maxOffset") == 1


async def test_tag_filter_returns_only_matching_messages(cluster):
    mq = MessageQueue("Tags", "broker-a", 0)
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        for i, tag in enumerate(["A", "B", "C", "A", "B"]):
            m = Message("Tags", f"{tag}{i}".encode())
            m.tags = tag
            await producer.send(m, queue=mq)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(mq, 0, expression="A || C")
    assert [m.body for m in result.messages] == [b"A0", b"C2", b"A3"]
    assert result.next_begin_offset == 5


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_offsets_commit_and_query_in_both_serializations(cluster, serialize_type):
    from ferrymq.client.config import ClientConfig
    mq = MessageQueue("Offs", "broker-a", 1)
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, serialize_type=serialize_type)
    async with Producer("p", config=config) as producer:
        for i in range(3):
            await producer.send(Message("Offs", b"x"), queue=mq)
    async with PullConsumer("g-offs", config=ClientConfig(namesrv_addr=cluster.namesrv_addr, serialize_type=serialize_type)) as c:
        assert await c.max_offset(mq) == 3 and await c.min_offset(mq) == 0
        await c.commit(mq, 2)
        assert await c.committed(mq) == 2
        assert await c.committed(MessageQueue("Offs", "broker-a", 0)) == -1  # nothing committed, queue empty
        assert await c.search_offset(mq, 0) == 0


async def test_unknown_request_code_is_refused_and_the_connection_keeps_working(cluster):
    client = RemotingClient()
    try:
        response = await client.invoke(cluster.broker_addr, RemotingCommand.request(9999))
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert response.remark == " request type 9999 not supported"
        response = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert response.code == ResponseCode.SUCCESS and b"TBW102" in response.body
    finally:
        await client.close()


async def test_send_to_an_invalid_topic_or_forbidden_system_topic_is_refused(cluster):
    client = RemotingClient()
    base = {"a": "p", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0}
    try:
        bad = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {**base, "b": "no spaces"}, b"x"))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "invalid" in bad.remark
        forbidden = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {**base, "b": "SCHEDULE_TOPIC_XXXX"}, b"x"))
        assert forbidden.code == ResponseCode.NO_PERMISSION and "forbidden" in forbidden.remark
        missing = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "p"}, b"x"))
        assert missing.code == ResponseCode.SYSTEM_ERROR and "topic" in missing.remark
    finally:
        await client.close()


async def test_oversized_message_is_refused_with_message_illegal(tmp_path):
    from tests.support import InProcessCluster
    c = await InProcessCluster(tmp_path / "s", settings={"maxMessageSize": 1024}).start()
    try:
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            ok = await producer.send(Message("Big", b"x" * 1024))
            from ferrymq.client.errors import MQBrokerError
            with pytest.raises(MQBrokerError) as e:
                await producer.send(Message("Big", b"x" * 1025), queue=ok.message_queue)
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            assert await consumer.max_offset(ok.message_queue) == ok.queue_offset + 1
    finally:
        await c.stop()


async def test_compressed_bodies_reach_the_consumer_as_the_producer_wrote_them(cluster):
    """Java producers zlib-compress bodies over 4 KiB and set sysFlag bit 0; the broker stores
    them as sent and the consumer inflates them."""
    import zlib

    original = b"compressible " * 1000
    client = RemotingClient()
    try:
        response = await client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
            "a": "p", "b": "Zipped", "c": "TBW102", "d": 4, "e": 0, "f": 0x301, "g": 0, "h": 0},
            zlib.compress(original, 5)))
    finally:
        await client.close()
    assert response.code == ResponseCode.SUCCESS
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(MessageQueue("Zipped", "broker-a", 0), 0)
    got = result.messages[0]
    assert got.body == original and not got.sys_flag & 0x1


async def test_short_polling_holds_a_pull_only_short_polling_time_mills(tmp_path):
    from tests.support import InProcessCluster
    c = await InProcessCluster(tmp_path / "s", settings={"longPollingEnable": "false",
                                                         "shortPollingTimeMills": 300}).start()
    mq = MessageQueue("Short", "broker-a", 0)
    try:
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer, \
                PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            await producer.send(Message("Short", b"first"), queue=mq)
            started = time.monotonic()
            result = await consumer.pull(mq, 1, suspend=10.0)  # asks for 10 s; the broker holds 0.3 s
            took = time.monotonic() - started
    finally:
        await c.stop()
    assert result.status is PullStatus.NO_NEW_MSG
    assert 0.2 < took < 5.0, took


async def test_pulls_of_cached_data_read_on_the_loop_reads_from_disk_in_the_read_pool(cluster, monkeypatch):
    """A pull whose data is in the page cache reads on the event loop (no thread hop): from one
    of a queue's newest entries as it is, from older ones after reads that never wait for the
    disk. One that would wait for the disk, or whose records left the in-memory window, goes to
    the read pool. All answer the same records."""
    import ferrymq.store.asyncio_store as asyncio_store
    from tests.support import evict_from_page_cache
    monkeypatch.setattr(asyncio_store, "RECENT_QUEUE_ENTRIES", 10)
    mq = MessageQueue("Recent", "broker-a", 0)
    store = cluster.broker.store
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer, \
            PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        for i in range(40):
            await producer.send(Message("Recent", f"m{i}".encode()), queue=mq)
        await store.flush_commit_log()
        await store.flush_consume_queues()
        on_loop, in_pool = store.reads_on_loop, store.reads_in_pool
        old = await consumer.pull(mq, 0, max_nums=8)  # 40 entries behind the head, cached
        assert (store.reads_on_loop, store.reads_in_pool) == (on_loop + 1, in_pool)
        evict_from_page_cache(cluster.data_dir)  # (nothing has mapped these pages yet)
        from_disk = await consumer.pull(mq, 0, max_nums=8)
        assert (store.reads_on_loop, store.reads_in_pool) == (on_loop + 1, in_pool + 1)
        recent = await consumer.pull(mq, 35, max_nums=8)  # 5 behind
        assert (store.reads_on_loop, store.reads_in_pool) == (on_loop + 2, in_pool + 1)
        # Recent entries whose records are no longer in the CommitLog's in-memory window: the
        # read on the loop declines after its ConsumeQueue read, and the pool reads them.
        # (The class's, over the instance's: the cluster's broker holds the one MessageStore here.)
        monkeypatch.setattr(MessageStore, "in_memory_window", property(lambda self: 0), raising=False)
        cold = await consumer.pull(mq, 35, max_nums=8)
        assert (store.reads_on_loop, store.reads_in_pool) == (on_loop + 2, in_pool + 2)
    assert [m.body for m in old.messages] == [m.body for m in from_disk.messages] == \
        [f"m{i}".encode() for i in range(8)]
    assert [m.body for m in recent.messages] == [m.body for m in cold.messages] == \
        [f"m{i}".encode() for i in range(35, 40)]
    assert recent.next_begin_offset == cold.next_begin_offset == 40
