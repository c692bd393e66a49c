"""Master–slave replication (issue 13) with real processes on 127.0.0.1: a FerryMQ master and
a FerryMQ slave under one brokerName, the slave following the master's CommitLog on the
RocketMQ 4.x HA protocol.

What users rely on: with SYNC_MASTER every acknowledged message is on the slave, byte for
byte; a slave refuses sends; the master keeps serving when the replication link is cut
(FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE under SYNC_MASTER, SEND_OK under ASYNC_MASTER) and
the slave catches up once it is back, also after being killed in the middle of a transfer or
after its disk was full; the slave gets its master's metadata; with the master killed, a
consumer keeps consuming from the slave; /metrics shows roles and lag.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common import rocketmq_json
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import Recorder
from testkit.failover import create_topic
from tests.integration.store_checks import check_consume_queues_agree, offline_store
from testkit.processes import BrokerPair, SEGMENT
from tests.replication_support import (AckedLoad, assert_acked_on_both, commit_log_range,
                                      send_soon_and_later_timers, TcpProxy)
from tests.store.small_fs import fill_completely, small_filesystem_or_skip
from testkit.ports import free_port
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TOPIC = "ReplicatedTopic"
# 20 000 by default (about 20 s here); FERRYMQ_HA_MESSAGES overrides it.
MESSAGES = int(os.environ.get("FERRYMQ_HA_MESSAGES", "20000"))
# kill -9 rounds of the chaos test: a few in make test, FERRYMQ_HA_KILLS=50 for the acceptance run.
KILLS = int(os.environ.get("FERRYMQ_HA_KILLS", "4"))


@pytest.fixture
def pair(tmp_path):
    created: list[BrokerPair] = []

    def make(role: str = "SYNC_MASTER", settings: list[str] | None = None) -> BrokerPair:
        p = BrokerPair(tmp_path, role, settings or [])
        created.append(p)
        p.start_namesrv()
        return p

    yield make
    for p in created:
        print(p.logs())  # shown when the test failed
        p.stop_all()


async def send_all(producer: Producer, count: int, prefix: str, concurrency: int = 64) -> list:
    """Send ``count`` messages, ``concurrency`` at a time; returns the SendResults in order."""
    results: list = [None] * count
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            results[i] = await producer.send(Message(TOPIC, f"{prefix}-{i}-".encode() + bytes(40 + i % 300),
                                                     properties={"KEYS": f"{prefix}-{i}"}))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def acked_end(results) -> int:
    """The CommitLog offset just past the last acknowledged message (from offset msgIds)."""
    return max(decode_offset_msg_id(r.offset_msg_id)[2] for r in results) + 1


async def slave_caught_up(p: BrokerPair, end: int) -> bool:
    """The slave's CommitLog holds the master's bytes up to ``end`` (a whole record past it)."""
    start = max(0, end - end % SEGMENT - SEGMENT)
    master = commit_log_range(p.master_dir, start, end)
    return len(master) == end - start and commit_log_range(p.slave_dir, start, end) == master


# SYNC_FLUSH: a round's sends wait for its fsync and then for its replication, together both times.
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sync_master_acknowledges_only_what_the_slave_has_byte_for_byte(pair, flush):
    p = pair("SYNC_MASTER", ["syncFlushTimeout=10000", f"flushDiskType={flush}"])
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("ha-producer", namesrv_addr=p.namesrv, send_timeout=15)
        await producer.start()
        try:
            # The slave connects on its own (the name server told it the master's HA address).
            first = await producer.send(Message(TOPIC, b"first"))
            if first.status is SendStatus.SLAVE_NOT_AVAILABLE:  # before the slave connected: stored anyway
                await wait_until(lambda: _send_ok(producer), 20, "the slave connected")
            started = time.monotonic()
            results = await send_all(producer, MESSAGES, "sync")
            took = time.monotonic() - started
        finally:
            await producer.close()
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        print(f"{MESSAGES} SYNC_MASTER sends in {took:.1f} s")
        return results

    results = asyncio.run(scenario())
    end = acked_end(results)
    # Acknowledged means already on the slave: no waiting here. Compare every byte up to the
    # end of the last acknowledged message, files rolled included.
    slave_bytes = commit_log_range(p.slave_dir, 0, end)
    assert len(slave_bytes) == end and end > 3 * SEGMENT
    assert slave_bytes == commit_log_range(p.master_dir, 0, end)

    # The slave dispatched what it copied: after a clean stop its ConsumeQueues agree with its
    # CommitLog and hold every acknowledged message where the master said it is.
    assert p.processes["slave"].stop() == 0
    with offline_store(p.slave_dir, p.tmp / "slave-copy", [f"mappedFileSizeCommitLog={SEGMENT}"]) as store:
        assert check_consume_queues_agree(store) >= MESSAGES
        for r in results[:: max(1, MESSAGES // 500)]:
            got = store.get_messages("g", TOPIC, r.message_queue.queue_id, r.queue_offset, 1)
            assert got.records and decode_offset_msg_id(r.offset_msg_id)[2] == int.from_bytes(got.records[0][28:36], "big")


async def _send_ok(producer: Producer) -> bool:
    return (await producer.send(Message(TOPIC, b"probe"))).status is SendStatus.SEND_OK


def test_a_slave_refuses_sends_with_rocketmqs_answer_and_registers_beside_its_master(pair):
    p = pair("ASYNC_MASTER")
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        async with AdminClient(namesrv_addr=p.namesrv) as admin:
            async def both_in_route():
                try:
                    route = await admin.topic_route(TOPIC)
                except MQClientError:  # the master's registration with the topic is on its way
                    return None
                addrs = {b.broker_name: b.broker_addrs for b in route.broker_datas}.get("ha-broker", {})
                return addrs if set(addrs) == {0, 1} else None
            addrs = await wait_until(both_in_route, 30, "the route listing master (0) and slave (1)")
        assert addrs[0] == f"127.0.0.1:{p.master_port}" and addrs[1] == f"127.0.0.1:{p.slave_port}"
        client = RemotingClient()
        try:
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
                "a": "g", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000),
                "h": 0, "i": "", "j": 0, "k": False, "m": False}, b"to the slave")
            answer = await client.invoke(f"127.0.0.1:{p.slave_port}", req, 5)
        finally:
            await client.close()
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "messages are put to the slave" in answer.remark

    asyncio.run(scenario())


def test_a_slave_copies_its_masters_topics_groups_and_offsets(pair):
    """SlaveSynchronize: topic configs, subscription groups, consumer and delay offsets reach
    the slave (asked for the master's address from the name server's answer)."""
    p = pair("ASYNC_MASTER", ["slaveSynchronizeInterval=500"])
    p.start_master()
    p.start_slave()
    slave = f"127.0.0.1:{p.slave_port}"

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        async with AdminClient(namesrv_addr=p.namesrv) as admin:
            await admin.create_group("ha-group", cluster="HACluster", retry_max_times=3)
        async with PullConsumer("ha-group", namesrv_addr=p.namesrv) as consumer:
            await consumer.commit(MessageQueue(TOPIC, "ha-broker", 2), 42)
        client = RemotingClient()
        try:
            async def on_slave(code: int) -> dict:
                answer = await client.invoke(slave, RemotingCommand.request(code), 5)
                assert answer.code == ResponseCode.SUCCESS
                return rocketmq_json.loads(answer.body)

            async def synced() -> bool:
                topics = (await on_slave(RequestCode.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
                groups = (await on_slave(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))["subscriptionGroupTable"]
                offsets = (await on_slave(RequestCode.GET_ALL_CONSUMER_OFFSET))["offsetTable"]
                return (TOPIC in topics and groups.get("ha-group", {}).get("retryMaxTimes") == 3
                        and offsets.get(f"{TOPIC}@ha-group", {}).get(2) == 42)
            await wait_until(synced, 20, "the slave's copy of the master's metadata")
            query = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                            {"consumerGroup": "ha-group", "topic": TOPIC, "queueId": 2})
            assert (await client.invoke(slave, query, 5)).get_long("offset") == 42
        finally:
            await client.close()

    asyncio.run(scenario())


async def consumer_offsets(addr: str, group: str) -> dict[int, int]:
    client = RemotingClient()
    try:
        out = {}
        for q in range(4):
            answer = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": TOPIC, "queueId": q}), 5)
            out[q] = answer.get_long("offset", -1) if answer.code == ResponseCode.SUCCESS else -1
        return out
    finally:
        await client.close()


@pytest.mark.slow
def test_a_consumer_keeps_consuming_from_the_slave_when_the_master_is_killed(pair):
    """kill -9 the master: the route lists only the slave; a FerryMQ push consumer reads its
    offsets there (copied from the master) and consumes the replicated backlog from it,
    without committing offsets through it."""
    p = pair("ASYNC_MASTER", ["slaveSynchronizeInterval=500"])
    p.start_master()
    p.start_slave()
    slave = f"127.0.0.1:{p.slave_port}"

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("ha-producer", namesrv_addr=p.namesrv)
        await producer.start()
        rec = Recorder()

        def consumer() -> PushConsumer:
            return (PushConsumer("ha-readers", namesrv_addr=p.namesrv).subscribe(TOPIC)
                    .register_message_listener_concurrently(rec.listener("reader")))
        try:
            c = consumer()
            await c.start()
            # Owned before the sends: a new group's queue found empty starts at its end (the
            # client asks the broker for the end after its offset query), which sends landing
            # between the two requests would be behind.
            await wait_until(lambda: {mq.queue_id for mq in c.rebalancer.process_queues if mq.topic == TOPIC}
                             == {0, 1, 2, 3}, 30, "the consumer owning the topic's queues")
            first = {f"first-{i}" for i in range(200)}
            await send_all(producer, 200, "first", concurrency=8)
            await wait_until(lambda: first <= rec.keys(), 30, "the first messages consumed from the master")
            await c.shutdown()  # its offsets are on the master ...
            backlog = await send_all(producer, 300, "backlog", concurrency=8)
        finally:
            await producer.close()
        master_offsets = await consumer_offsets(f"127.0.0.1:{p.master_port}", "ha-readers")
        assert sum(master_offsets.values()) == 200
        await wait_until(lambda: slave_caught_up(p, acked_end(backlog)), 20, "the backlog on the slave")
        async def offsets_copied():  # ... and copied to the slave
            return await consumer_offsets(slave, "ha-readers") == master_offsets
        await wait_until(offsets_copied, 20, "the group's offsets on the slave")

        p.processes["master"].kill()
        # A pull consumer's queue-offset reads are answered by the slave now (its queues are copies)
        async with PullConsumer("ha-offsets", namesrv_addr=p.namesrv) as reader:
            async def master_gone():
                queues = await reader.fetch_queues(TOPIC)
                return bool(queues) and reader.instance.broker_addr(queues[0].broker_name) is None
            await wait_until(master_gone, 30, "the master gone from the route")
            queues = await reader.fetch_queues(TOPIC)
            assert sum([await reader.max_offset(mq) for mq in queues]) == 500
            assert [await reader.min_offset(mq) for mq in queues] == [0] * len(queues)
        seen_before = len(rec.events)
        c = consumer()
        await c.start()
        try:
            await wait_until(lambda: {f"backlog-{i}" for i in range(300)} <= rec.keys(), 60,
                             "the backlog consumed from the slave")
            assert not first & {e.key for e in rec.events[seen_before:]}, "offsets read from the slave: no rewind"
            assert await consumer_offsets(slave, "ha-readers") == master_offsets  # nothing committed there
        finally:
            await c.shutdown()

    asyncio.run(scenario())


def test_metrics_show_each_brokers_role_and_replication_lag(pair):
    p = pair("SYNC_MASTER")
    p.http_ports = {"master": free_port(), "slave": free_port()}
    p.start_master()
    p.start_slave()

    def scrape(name: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.http_ports[name]}/metrics", timeout=5) as r:
            return r.read().decode()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("ha-producer", namesrv_addr=p.namesrv)
        await producer.start()
        try:
            await wait_until(lambda: _send_ok(producer), 30, "the slave replicating")
        finally:
            await producer.close()

    asyncio.run(scenario())
    master, slave = scrape("master"), scrape("slave")
    assert re.search(r'ferrymq_broker_role\{[^}]*role="SYNC_MASTER"\} 1\.0', master)
    assert re.search(r'ferrymq_broker_role\{[^}]*role="SLAVE"\} 1\.0', slave)
    assert re.search(r"ferrymq_broker_replication_slaves\{[^}]*\} 1\.0", master)
    assert re.search(r'ferrymq_broker_replication_slave_lag_bytes\{[^}]*slave="127\.0\.0\.1:\d+"\} 0\.0', master)
    assert re.search(r"ferrymq_broker_replication_connected\{[^}]*\} 1\.0", slave)
    assert re.search(r"ferrymq_broker_replication_lag_bytes\{[^}]*\} 0\.0", slave)


def test_a_quiet_link_outlives_the_housekeeping_interval_on_heartbeats(pair):
    """No sends for three housekeeping intervals: the master's heartbeats keep the slave's
    connection (and the slave's offset reports the master's), so nobody reconnects and a SYNC
    send afterwards is acknowledged at once."""
    p = pair("SYNC_MASTER", ["haHousekeepingInterval=1500", "haSendHeartbeatInterval=300"])
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("ha-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
        await producer.start()
        try:
            await wait_until(lambda: _send_ok(producer), 30, "the slave replicating")
            await asyncio.sleep(4.5)
            after = await send_all(producer, 20, "after-quiet", concurrency=4)
            assert {r.status for r in after} == {SendStatus.SEND_OK}
        finally:
            await producer.close()

    asyncio.run(scenario())
    master_log, slave_log = p.processes["master"].log(), p.processes["slave"].log()
    assert master_log.count("connected") == 1 and "disconnected" not in master_log, master_log[-3000:]
    assert slave_log.count("replicating from master") == 1 and "stopped" not in slave_log, slave_log[-3000:]


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
def test_replication_link_cut_and_restored(pair, role):
    """A partition between master and slave (a proxy that stops forwarding): an ASYNC master
    answers SEND_OK throughout; a SYNC master stores and answers FLUSH_SLAVE_TIMEOUT, then
    SLAVE_NOT_AVAILABLE once it dropped the silent slave. Restored, the slave catches up and
    SYNC sends are acknowledged again."""
    p = pair(role, ["syncFlushTimeout=1000", "haHousekeepingInterval=3000", "haSendHeartbeatInterval=1000"])
    p.start_master()

    async def scenario():
        proxy = await TcpProxy(p.master_ha).start()
        try:
            await asyncio.to_thread(p.start_slave, f"haMasterAddress={proxy.address}")
            await create_topic(p.namesrv, TOPIC)
            producer = Producer("ha-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
            await producer.start()
            try:
                await wait_until(lambda: _send_ok(producer), 30, "the slave replicating")
                before = await send_all(producer, 200, "before", concurrency=8)
                assert {r.status for r in before} == {SendStatus.SEND_OK}

                proxy.cut()
                during = await send_all(producer, 20, "during", concurrency=4)
                statuses = {r.status for r in during}
                if role == "ASYNC_MASTER":
                    assert statuses == {SendStatus.SEND_OK}
                else:
                    assert SendStatus.FLUSH_SLAVE_TIMEOUT in statuses
                    assert statuses <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}
                    # Housekeeping drops the silent slave: the answer becomes SLAVE_NOT_AVAILABLE, at once.
                    await wait_until(lambda: _status_is(producer, SendStatus.SLAVE_NOT_AVAILABLE), 20,
                                     "the master to give up on the silent slave")
                end = acked_end(during)  # stored whatever the answer said
                assert not await slave_caught_up(p, end)

                proxy.restore()
                await wait_until(lambda: slave_caught_up(p, end), 30, "the slave catching up after the cut")
                after = await send_all(producer, 100, "after", concurrency=8)
                assert {r.status for r in after} == {SendStatus.SEND_OK}
                await wait_until(lambda: slave_caught_up(p, acked_end(after)), 10, "the slave in step")
            finally:
                await producer.close()
        finally:
            await proxy.stop()

    asyncio.run(scenario())


async def _status_is(producer: Producer, status: SendStatus) -> bool:
    return (await producer.send(Message(TOPIC, b"probe"))).status is status


def test_a_slave_killed_mid_transfer_catches_up_after_restart(pair):
    """Kill -9 the slave while a backlog of several CommitLog files streams to it (slowed by
    the proxy): the restarted slave asks for the end of its own CommitLog (its torn tail was
    never written) and ends byte-identical to the master."""
    p = pair("ASYNC_MASTER")
    p.start_master()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        proxy = await TcpProxy(p.master_ha).start()
        producer = Producer("ha-producer", namesrv_addr=p.namesrv)
        await producer.start()
        try:
            # The slave copies a little, then stops: it resumes from there, not from the
            # master's last file as a new slave would.
            await asyncio.to_thread(p.start_slave, f"haMasterAddress={proxy.address}")
            first = await send_all(producer, 10, "first", concurrency=1)
            await wait_until(lambda: slave_caught_up(p, acked_end(first)), 20, "the slave's first copy")
            assert p.processes["slave"].stop() == 0
            end = acked_end(await send_all(producer, 6000, "backlog"))
            assert end > 2 * SEGMENT

            proxy.rate = 1024 * 1024  # bytes/s: the transfer takes a few seconds
            await asyncio.to_thread(p.start_slave, f"haMasterAddress={proxy.address}")

            def partly_copied() -> bool:
                return len(commit_log_range(p.slave_dir, SEGMENT, SEGMENT + 4096)) > 0
            await wait_until(partly_copied, 30, "the slave in the middle of the transfer", interval=0.01)
            p.processes["slave"].kill()
            assert not await slave_caught_up(p, end)

            proxy.rate = 0
            await asyncio.to_thread(p.start_slave, f"haMasterAddress={proxy.address}")
            await wait_until(lambda: slave_caught_up(p, end), 60, "the restarted slave catching up")
        finally:
            await producer.close()
            await proxy.stop()
        assert commit_log_range(p.slave_dir, 0, end) == commit_log_range(p.master_dir, 0, end)

    asyncio.run(scenario())


@pytest.fixture
def small_fs(tmp_path):
    with small_filesystem_or_skip(tmp_path, 24, "the slave disk-full test") as path:
        yield path


def test_a_slave_whose_disk_is_full_catches_up_once_space_is_freed(pair, small_fs):
    """The slave's store on a small file system filled up: the SYNC master keeps storing and
    answers FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE; with space again the slave retries,
    catches up byte for byte, and sends are acknowledged as before."""
    mount = small_fs
    p = pair("SYNC_MASTER", ["syncFlushTimeout=1000", "mappedFileSizeConsumeQueue=4000", "maxHashSlotNum=64",
                             "maxIndexNum=2000", "cleanFileForciblyEnable=false"])
    p.slave_dir_override = mount / "slave"
    try:
        p.start_master()
        p.start_slave()

        async def scenario():
            await create_topic(p.namesrv, TOPIC)
            producer = Producer("ha-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
            await producer.start()
            try:
                await wait_until(lambda: _send_ok(producer), 30, "the slave replicating")
                before = await send_all(producer, 100, "before", concurrency=8)
                assert {r.status for r in before} == {SendStatus.SEND_OK}

                filler = await asyncio.to_thread(fill_completely, mount)

                async def send(i: int):
                    return await producer.send(Message(TOPIC, bytes(16 * 1024), properties={"KEYS": f"full-{i}"}))

                # The slave's CommitLog blocks were allocated ahead of its writer before the disk
                # filled (at most to the end of its 1 MiB segment here): it stores into them, then
                # meets the full disk.
                during = []
                while len(during) < 200 and (not during or during[-1].status is SendStatus.SEND_OK):
                    during.append(await send(len(during)))
                assert during[-1].status is not SendStatus.SEND_OK, "3 MiB more and the slave never met the full disk"
                assert len(during) <= 80, "more than the segment's allocated blocks were stored"
                during += [await send(len(during)) for _ in range(5)]
                statuses = {r.status for r in during[-6:]}
                assert SendStatus.SEND_OK not in statuses
                assert statuses <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}
                end = acked_end(during)  # stored on the master all the same
                assert not await slave_caught_up(p, end)

                filler.unlink()
                await wait_until(lambda: slave_caught_up(p, end), 30, "the slave catching up with space again")
                await wait_until(lambda: _send_ok(producer), 20, "SYNC sends acknowledged again")
            finally:
                await producer.close()

        asyncio.run(scenario())
        assert "No space left on device" in p.processes["slave"].log()
    finally:
        p.stop_all()  # before the file system goes away


def test_random_kill_9_of_master_or_slave_under_sync_load_loses_nothing_acknowledged(pair):
    """SYNC_MASTER under continuous load while master or slave (at random) is killed -9 and
    restarted, KILLS times: every message the master acknowledged is, at the end, in both
    CommitLogs where its offset msgId says, with its body, byte-identical between them."""
    p = pair("SYNC_MASTER", ["syncFlushTimeout=2000"])
    p.start_master()
    p.start_slave()
    rng = random.Random(int(os.environ.get("FERRYMQ_HA_SEED", "13")))

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("ha-chaos", namesrv_addr=p.namesrv, send_timeout=3, retry_times=0)
        await producer.start()
        try:
            async with AckedLoad(producer, TOPIC) as load:
                for round_ in range(KILLS):
                    target = rng.choice(["master", "slave"])
                    await load.more(20, 60, f"acknowledged sends before kill {round_ + 1}")
                    p.processes[target].kill()
                    await asyncio.to_thread(p.start_master if target == "master" else p.start_slave)
                await load.more(20, 60, "acknowledged sends after the last restart")
        finally:
            await producer.close()
        return load.acked

    acked = asyncio.run(scenario())
    end = max(phys for phys, _ in acked) + 1
    asyncio.run(wait_until(lambda: slave_caught_up(p, end), 30, "the slave caught up after the last round"))
    assert_acked_on_both(acked, p.master_dir, p.slave_dir)
    print(f"{KILLS} kills, {len(acked)} acknowledged messages all on master and slave")


def test_lag_in_bytes_and_seconds_grows_while_the_link_is_cut_and_returns_to_zero(pair):
    """What an operator reads of a slave that falls behind: the master's runtime info
    (GET_BROKER_RUNTIME_INFO, ferrymqHaSlaves and RocketMQ's slaveFallBehindMuch), its
    /metrics and ``ferrymq admin cluster list`` show the slave's lag in bytes and in seconds
    while the replication link is cut, the seconds growing; once restored, back to 0."""
    # A long housekeeping interval keeps the silent slave's connection (and so its lag) listed.
    p = pair("ASYNC_MASTER", ["haHousekeepingInterval=120000", "haSendHeartbeatInterval=1000"])
    p.http_ports = {"master": free_port()}
    p.start_master()
    master_addr = f"127.0.0.1:{p.master_port}"

    def scrape_lag_seconds() -> list[float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.http_ports['master']}/metrics", timeout=5) as r:
            text = r.read().decode()
        return [float(v) for v in re.findall(r"ferrymq_broker_replication_slave_lag_seconds\{[^}]*\} (\S+)", text)]

    def cluster_list() -> dict:
        done = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "cluster", "list", "--json",
                               "-n", p.namesrv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return {b["brokerId"]: b for b in json.loads(done.stdout)["brokers"]}

    async def scenario():
        proxy = await TcpProxy(p.master_ha).start()
        admin = AdminClient(namesrv_addr=p.namesrv)
        producer = Producer("ha-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
        try:
            await asyncio.to_thread(p.start_slave, f"haMasterAddress={proxy.address}")
            await create_topic(p.namesrv, TOPIC)
            await producer.start()

            async def slaves() -> list[dict]:
                return json.loads((await admin.broker_runtime_info(master_addr))["ferrymqHaSlaves"])

            async def level() -> bool:
                listed = await slaves()
                return len(listed) == 1 and listed[0]["lagBytes"] == 0 and listed[0]["lagSeconds"] == 0

            assert (await send_all(producer, 100, "before", concurrency=8))[-1].status is SendStatus.SEND_OK
            await wait_until(level, 30, "the slave level with its master")
            info = await admin.broker_runtime_info(master_addr)
            assert info["ferrymqHaRole"] == "ASYNC_MASTER" and info["slaveFallBehindMuch"] == "0"

            proxy.cut()
            cut_at = time.monotonic()
            during = await send_all(producer, 50, "during", concurrency=4)
            assert {r.status for r in during} == {SendStatus.SEND_OK}
            head = int((await admin.broker_runtime_info(master_addr))["commitLogMaxOffset"])
            first = (await slaves())[0]
            assert first["lagBytes"] == head - first["ackedOffset"] >= 50 * 40  # at least the bodies sent
            assert first["lagSeconds"] > 0

            async def seconds_grew() -> bool:
                return (await slaves())[0]["lagSeconds"] >= first["lagSeconds"] + 1

            await wait_until(seconds_grew, 10, "the lag in seconds to grow while the link is cut")
            later = (await slaves())[0]
            assert later["lagBytes"] == first["lagBytes"]  # nothing more arrived, nothing acknowledged
            assert later["lagSeconds"] <= time.monotonic() - cut_at + 0.5  # not older than the cut
            info = await admin.broker_runtime_info(master_addr)
            assert int(info["slaveFallBehindMuch"]) == first["lagBytes"]
            assert max(await asyncio.to_thread(scrape_lag_seconds)) >= 1
            shown = (await asyncio.to_thread(cluster_list))[0]["replication"]
            assert shown["role"] == "ASYNC_MASTER" and shown["slaves"][0]["lagBytes"] == first["lagBytes"]
            assert shown["slaves"][0]["lagSeconds"] >= 1

            proxy.restore()
            await wait_until(level, 30, "the slave level again once the link is back")
            assert await asyncio.to_thread(scrape_lag_seconds) == [0.0]
            assert (await admin.broker_runtime_info(master_addr))["slaveFallBehindMuch"] == "0"
            listed = await asyncio.to_thread(cluster_list)
            assert listed[0]["replication"]["slaves"][0]["lagBytes"] == 0
            assert listed[1]["replication"] == {"role": "SLAVE", "connected": True, "masterAddress": proxy.address}
        finally:
            await producer.close()
            await admin.close()
            await proxy.stop()

    asyncio.run(scenario())


def test_a_slaves_pending_timers_follow_what_its_master_fired(pair):
    """docs/timers.md#operator-views: the slave counts every timer it replicates, and once it has
    copied its master's timer checkpoint (every 3 s) the ones the master fired are no longer
    counted there; those still waiting are, with their first due time, as on the master."""
    p = pair("ASYNC_MASTER")
    p.start_master()
    p.start_slave()
    master, slave = f"127.0.0.1:{p.master_port}", f"127.0.0.1:{p.slave_port}"

    async def scenario():
        await create_topic(p.namesrv, "TimersSoon")
        await create_topic(p.namesrv, "TimersLater")
        soon, later = await send_soon_and_later_timers(p.namesrv, 2000)
        async with AdminClient(namesrv_addr=p.namesrv) as admin:
            async def pending(addr: str) -> dict[str, tuple[int, int]]:
                counts = (await admin.timer_metrics(addr)).timing_count
                return {t: (c.count, c.earliest_due_ms) for t, c in counts.items() if c.count}

            waiting = {"TimersSoon": (5, soon - soon % 1000), "TimersLater": (3, later - later % 1000)}
            await wait_until(lambda: _is(pending(slave), waiting), 20, "the slave counts the replicated timers")
            fired = {"TimersLater": (3, later - later % 1000)}
            await wait_until(lambda: _is(pending(master), fired), 20, "the master fired the soon timers")
            await wait_until(lambda: _is(pending(slave), fired), 20, "the slave's counts follow the master's firing")

    asyncio.run(scenario())


async def _is(value, expected) -> bool:
    return await value == expected
