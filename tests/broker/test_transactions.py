"""Transactional messages with FerryMQ's TransactionProducer against a real broker: a half
message is invisible until committed, a rollback is never delivered, an undecided one is
checked back with the producer (and survives a broker restart), one never decided is
discarded after transactionCheckMax checks, and a broker refusing transactions says so."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from ferrymq.broker.transactions import CHECK_MAX_TOPIC, HALF_TOPIC
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.transaction_producer import LocalTransactionState, TransactionProducer
from ferrymq.common.transaction_batches import END_TRANSACTIONS, MAX_HALVES, HalfRef, decode_failures, encode_halves
from ferrymq.common.message import Message
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import EndTransactionsHeader
from tests.consumer_support import cluster_with_topic, read_all
from testkit.wait import wait_until

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)
FAST_CHECKS = {"transactionCheckInterval": 200, "transactionTimeOut": 300}


@pytest.fixture
async def cluster(tmp_path, request):
    settings = {**FAST_CHECKS, **getattr(request, "param", {})}
    async with cluster_with_topic(tmp_path / "store", "Orders", 2, settings) as c:
        yield c


async def visible(ns: str, topic: str = "Orders") -> list:
    return await read_all(ns, topic)


def msg(body: bytes, key: str) -> Message:
    m = Message("Orders", body)
    m.keys = key
    return m


def keys(msgs) -> list[str]:
    return sorted(k for m in msgs for k in m.keys)


class Checks:
    """A check listener answering from a table, recording what it was asked."""

    def __init__(self, answers: dict[str, LocalTransactionState]) -> None:
        self.answers, self.asked = answers, []

    def __call__(self, msg):
        self.asked.append(msg.keys[0])
        return self.answers.get(msg.keys[0], UNKNOW)


def producer(ns: str, checks: Checks) -> TransactionProducer:
    return TransactionProducer("orders-tx", check_listener=checks, retry_times=0,
                               config=ClientConfig(namesrv_addr=ns, poll_name_server_interval=0.3,
                                                   heartbeat_broker_interval=0.3))


async def test_commit_delivers_rollback_does_not_and_nothing_shows_before_the_decision(cluster):
    ns = cluster.namesrv_addr
    seen_during_transaction = []

    async def execute(msg, arg):
        seen_during_transaction.append((msg.keys[0], keys(await visible(ns))))  # stored, not visible
        return arg

    async with producer(ns, Checks({})) as p:
        committed = await p.send_in_transaction(msg(b"paid", "order-1"), execute, COMMIT)
        rolled_back = await p.send_in_transaction(msg(b"cancelled", "order-2"), execute, ROLLBACK)
    assert committed.send.status.name == "SEND_OK" and committed.local_state is COMMIT
    assert rolled_back.local_state is ROLLBACK
    assert len(seen_during_transaction) == 2 and all(k not in v for k, v in seen_during_transaction)
    await wait_until(lambda: cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 2, 5,
                     "both decisions recorded")
    delivered = await visible(ns)
    assert keys(delivered) == ["order-1"] and delivered[0].body == b"paid"
    assert delivered[0].client_msg_id == committed.send.msg_id  # the id the producer was given
    assert "TRAN_MSG" not in delivered[0].properties and "REAL_TOPIC" not in delivered[0].properties
    await asyncio.sleep(0.8)  # several check rounds: decided messages are never checked
    assert keys(await visible(ns)) == ["order-1"]


async def test_an_undecided_transaction_is_checked_back_and_decided_by_the_producer(cluster):
    ns = cluster.namesrv_addr
    checks = Checks({"order-3": COMMIT, "order-4": ROLLBACK})

    def crash(msg, arg):
        raise RuntimeError("the database went away mid-transaction")

    async with producer(ns, checks) as p:
        await p.send_in_transaction(msg(b"three", "order-3"), lambda m, a: UNKNOW)
        await p.send_in_transaction(msg(b"four", "order-4"), crash)
        # deadlines for a loaded machine (make test runs modules in parallel); met in ~1 s when idle
        await wait_until(lambda: {"order-3", "order-4"} <= set(checks.asked), 30, "both checked back")
        await wait_until(lambda: cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 2, 20,
                         "both decisions recorded")
        await asyncio.sleep(0.8)
    delivered = await visible(ns)
    assert keys(delivered) == ["order-3"], "committed by the check, delivered once; the rollback never"
    assert checks.asked.count("order-3") == 1 and checks.asked.count("order-4") == 1


async def test_a_half_message_stored_by_one_producer_is_committed_by_another_once_however_often_it_is_ended(cluster):
    """prepare() and end() apart (what a Spark sink does: tasks store half messages, the driver
    commits them): a commit ended twice, twice at once, or retried after its answer was lost,
    delivers the message once (Apache would store a second copy)."""
    ns = cluster.namesrv_addr
    async with producer(ns, Checks({})) as writer:
        halves = [await writer.prepare(msg(b"row %d" % i, f"row-{i}")) for i in range(3)]
    assert keys(await visible(ns)) == [], "stored as half messages, not visible yet"
    async with producer(ns, Checks({})) as committer:
        await committer.end(halves[0], COMMIT)
        await committer.end(halves[0], COMMIT)  # ended again, e.g. a retry after a lost answer
        await asyncio.gather(committer.end(halves[1], COMMIT), committer.end(halves[1], COMMIT))
        await committer.end(halves[2], ROLLBACK)
        await committer.end(halves[2], ROLLBACK)
    assert keys(await visible(ns)) == ["row-0", "row-1"]


async def test_a_check_answer_racing_the_producers_own_commit_delivers_the_message_once(cluster):
    """The broker checks back a half message the producer is about to commit: the check's answer
    commits the copy it asked about, the producer's own commit names the original; one delivery."""
    ns = cluster.namesrv_addr
    checks = Checks({"order-9": COMMIT})
    async with producer(ns, checks) as p:
        half = await p.prepare(msg(b"nine", "order-9"))
        await wait_until(lambda: "order-9" in checks.asked, 30, "checked back")
        await wait_until(lambda: cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 1, 20,
                         "the check's answer recorded")
        await p.end(half, COMMIT)  # the producer's own decision, late
    assert keys(await visible(ns)) == ["order-9"]


async def test_an_undecided_transaction_survives_a_broker_restart(cluster):
    ns = cluster.namesrv_addr
    checks = Checks({})
    async with producer(ns, checks) as p:
        await p.send_in_transaction(msg(b"five", "order-5"), lambda m, a: UNKNOW)
        cluster.broker.config.transaction_check_interval = 3_600_000  # no check before the restart
    await cluster.restart_broker()
    checks.answers["order-5"] = COMMIT
    async with producer(ns, checks) as p:
        await wait_until(lambda: "order-5" in checks.asked, 10, "checked back by the restarted broker")
        await wait_until(lambda: cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 1, 5,
                         "the decision recorded")
    assert keys(await visible(ns)) == ["order-5"]


@pytest.mark.parametrize("cluster", [{"transactionCheckMax": 2}], indirect=True)
async def test_a_transaction_never_decided_is_discarded_after_the_last_check(cluster):
    ns = cluster.namesrv_addr
    checks = Checks({})
    async with producer(ns, checks) as p:
        await p.send_in_transaction(msg(b"six", "order-6"), lambda m, a: UNKNOW)
        await wait_until(lambda: cluster.broker.transactions.discarded == 1, 10, "discarded")
    assert checks.asked == ["order-6", "order-6"]
    assert keys(await visible(ns)) == []
    assert keys(await visible(ns, CHECK_MAX_TOPIC)) == ["order-6"]


@pytest.mark.parametrize("cluster", [{"rejectTransactionMessage": "true"}], indirect=True)
async def test_a_broker_refusing_transactions_says_so(cluster):
    ran = []
    async with producer(cluster.namesrv_addr, Checks({})) as p:
        with pytest.raises(MQBrokerError, match="sending transaction message is forbidden"):
            await p.send_in_transaction(Message("Orders", b"x"), lambda m, a: ran.append(m) or COMMIT)
        with pytest.raises(MQBrokerError, match="sending transaction message is forbidden"):
            await p.prepare_many([Message("Orders", b"y"), Message("Orders", b"z")])
    assert ran == [] and cluster.broker.store.max_offset(HALF_TOPIC, 0) == 0


async def test_a_committed_timer_message_waits_for_its_time_from_the_commit(cluster):
    """As Apache: the half message keeps its timer untouched; the commit record is the timed put."""
    ns = cluster.namesrv_addr
    m = msg(b"later", "order-t")
    m.properties["TIMER_DELAY_SEC"] = "2"
    async with producer(ns, Checks({})) as p:
        await p.send_in_transaction(m, lambda _m, arg: arg, COMMIT)
        committed_at = time.time()
    await wait_until(lambda: cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 1, 5,
                     "the commit recorded")
    assert keys(await visible(ns)) == []  # committed, waiting under the timer topic
    await wait_until(lambda: cluster.broker.store.max_offset("Orders", 0) + cluster.broker.store.max_offset(
        "Orders", 1) == 1, 10, "the timer fired")
    assert time.time() - committed_at >= 1.9  # counted from the broker receiving the commit
    delivered = await visible(ns)
    assert keys(delivered) == ["order-t"] and int(delivered[0].properties["TIMER_OUT_MS"]) >= committed_at * 1000 + 1990


# ------------------------------------------------------------------ END_TRANSACTIONS (FerryMQ's own)


async def test_many_half_messages_are_stored_and_ended_in_one_request_once_each_and_in_the_order_given(cluster):
    """TransactionProducer.prepare_many and end_many (the Spark sink): SEND_HALF_MESSAGES stores
    them consecutively in the half queue, invisible; END_TRANSACTIONS decides them, the commits
    reaching the queue in the order given, not the order stored; ending them all again, in bulk or
    one by one, stores nothing twice."""
    ns = cluster.namesrv_addr
    async with producer(ns, Checks({})) as p:
        queue = (await p.publish_queues("Orders"))[0]
        halves = await p.prepare_many([msg(b"row %d" % i, f"row-{i:02}") for i in range(30)], queue=queue)
        assert [h.queue_id for h in halves] == [queue.queue_id] * 30
        assert [h.queue_offset for h in halves] == list(range(halves[0].queue_offset, halves[0].queue_offset + 30))
        assert cluster.broker.store.max_offset(HALF_TOPIC, 0) == 30 and keys(await visible(ns)) == []
        committed, rolled_back = halves[:20][::-1], halves[20:]
        await asyncio.gather(p.end_many(committed, COMMIT, ordered=True), p.end_many(rolled_back, ROLLBACK))
        assert cluster.broker.store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 30
        await p.end_many(committed, COMMIT)
        await p.end(committed[0], COMMIT)
    delivered = [m for m in await visible(ns) if m.queue_id == queue.queue_id]
    assert [m.keys[0] for m in sorted(delivered, key=lambda m: m.queue_offset)] == [f"row-{i:02}" for i in range(19, -1, -1)]
    await asyncio.sleep(0.8)  # check rounds: none of the 30 is asked about
    assert len(await visible(ns)) == 20


async def test_end_transactions_names_each_half_it_could_not_record_and_refuses_a_malformed_request(cluster):
    ns = cluster.namesrv_addr
    async with producer(ns, Checks({})) as p:
        good = [await p.prepare(msg(b"ok %d" % i, f"ok-{i}")) for i in range(2)]
        addr = await p.instance.find_broker_addr(good[0].broker_name, "Orders")

        async def end_transactions(group: str, refs: list[HalfRef], body: bytes | None = None):
            return await p.instance.invoke_broker(addr, RemotingCommand.request(
                END_TRANSACTIONS, EndTransactionsHeader(producer_group=group, commit_or_rollback=COMMIT.value)
                .to_ext_fields(), body=encode_halves(refs) if body is None else body))

        ref = [HalfRef(h.queue_offset, h.commit_log_offset, h.msg_id) for h in good]
        wrong_offset = HalfRef(ref[1].tran_state_table_offset + 7, ref[1].commit_log_offset, ref[1].msg_id)
        nowhere = HalfRef(0, 10 ** 12, "none")
        answer = await end_transactions("orders-tx", [ref[0], wrong_offset, nowhere])
        assert answer.code == ResponseCode.SUCCESS
        assert [(f.index, f.remark) for f in decode_failures(answer.body)] == [
            (1, "The transaction state table offset wrong"), (2, "Find prepared transaction message failed")]
        other_group = decode_failures((await end_transactions("someone-else", [ref[1]])).body)
        assert [(f.index, f.remark) for f in other_group] == [(0, "The producer group wrong")]
        assert keys(await visible(ns)) == ["ok-0"], "only the one named rightly is committed"

        malformed = await end_transactions("orders-tx", [], body=b'{"halves": [[1, 2]]}')
        assert malformed.code == ResponseCode.MESSAGE_ILLEGAL and "END_TRANSACTIONS: the body is not" in malformed.remark
        too_many = await end_transactions("orders-tx", [ref[1]] * (MAX_HALVES + 1))
        assert too_many.code == ResponseCode.MESSAGE_ILLEGAL and f"at most {MAX_HALVES}" in too_many.remark
        with pytest.raises(MQBrokerError, match="1 of 1 transactions not recorded"):
            await p.end_many([dataclasses.replace(good[1], queue_offset=good[1].queue_offset + 7)], COMMIT)
        await p.end_many([good[1]], COMMIT)
    assert keys(await visible(ns)) == ["ok-0", "ok-1"]


async def test_half_messages_larger_together_than_one_request_are_stored_in_several(cluster):
    ns = cluster.namesrv_addr
    async with producer(ns, Checks({})) as p:
        big = [msg(bytes([65 + i]) * 300_000, f"big-{i}") for i in range(8)]  # 2.4 MB: three requests
        queue = (await p.publish_queues("Orders"))[1]
        halves = await p.prepare_many(big, queue=queue)
        assert {h.queue_id for h in halves} == {queue.queue_id} and len({h.queue_offset for h in halves}) == 8
        await p.end_many(halves, COMMIT, ordered=True)
    delivered = sorted(await visible(ns), key=lambda m: m.queue_offset)
    assert [m.keys[0] for m in delivered] == [f"big-{i}" for i in range(8)]
    assert [m.body for m in delivered] == [m.body for m in big]
