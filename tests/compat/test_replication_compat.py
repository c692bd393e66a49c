"""Replication across implementations (issue 13): Apache RocketMQ 4.9.7 and FerryMQ on the
same HA wire protocol, each as the other's slave.

Both masters run SYNC_MASTER, so every SEND_OK is a message the other implementation's slave
acknowledged; the slave's CommitLog is then compared byte for byte with the master's. The
Apache slave is also read by the official Java push consumer once the FerryMQ master is
gone (the slave got the topic from the master through SlaveSynchronize, and the consumer offsets
committed on the master). It runs with the
default slaveReadEnable=false: a 4.9.7 slave still serves the pull (and suggests broker 0),
which FerryMQ's broker/ha/reads.py follows. The FerryMQ slave's ConsumeQueues are checked
against every acknowledged message.
"""

from __future__ import annotations

import asyncio
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common import rocketmq_json
from ferrymq.common.message import Message
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import MessageQueue, TimerCheckpointBody
from tests.integration.store_checks import check_consume_queues_agree, offline_store
from testkit.processes import BrokerPair, SEGMENT
from tests.replication_support import commit_log_range, send_soon_and_later_timers
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import poll_until, wait_until

from testkit.apache import ApacheRocketMQ, remoting_request
from testkit.java_client import ROCKETMQ5_VERSION, JavaClient

pytestmark = pytest.mark.compat

COUNT = 2000
GET_TOPIC_STATS_INFO = 202
QUERY_CONSUMER_OFFSET = 14
GET_ALL_CONSUMER_OFFSET = 43
BROKER_NAME = "ha-compat"
CLUSTER = "FerryCompatCluster"
SYNCED_GROUP = "OffsetsCopiedBySlave"
# What Apache's SlaveSynchronize logs when one of its copies fails ("SyncConsumerOffset Exception", ...).
SLAVE_SYNC_ERROR = re.compile(r"Sync\w+ Exception|syncTimerCheckPoint Exception")


async def _create_topic(namesrv: str, topic: str) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        async def master_known():
            try:
                return BROKER_NAME in await admin.master_addrs(CLUSTER)
            except MQClientError:  # the cluster is not known yet
                return False
        await wait_until(master_known, 60, "the master in the name server's cluster info")
        await admin.create_topic(topic, read_queues=4, write_queues=4, cluster=CLUSTER)


async def _send(namesrv: str, topic: str, count: int) -> list:
    producer = Producer("ha-compat-producer", namesrv_addr=namesrv, send_timeout=15)
    await producer.start()
    results: list = [None] * count
    indexes = iter(range(count))

    async def worker():
        for i in indexes:
            results[i] = await producer.send(Message(topic, f"ha-{i}-".encode() + bytes(20 + i % 700),
                                                     properties={"KEYS": f"ha-key-{i}"}))
    try:
        # A SYNC master answers SLAVE_NOT_AVAILABLE until the slave has connected: wait for that.
        async def slave_acks():
            return (await producer.send(Message(topic, b"probe"))).status is SendStatus.SEND_OK
        await wait_until(slave_acks, 60, "the slave connected to the SYNC master", interval=0.5)
        await asyncio.gather(*(worker() for _ in range(16)))
    finally:
        await producer.close()
    return results


async def _commit_on_master(namesrv: str, topic: str, offsets: dict[int, int]) -> None:
    async with PullConsumer(SYNCED_GROUP, namesrv_addr=namesrv) as consumer:
        for queue_id, offset in offsets.items():
            await consumer.commit(MessageQueue(topic, BROKER_NAME, queue_id), offset)


def _offsets_on(addr: str, topic: str, queue_ids) -> dict[int, int]:
    """The group's offsets as a broker answers QUERY_CONSUMER_OFFSET (queues it has none for left out)."""
    found = {}
    for queue_id in queue_ids:
        header, _ = remoting_request(addr, QUERY_CONSUMER_OFFSET, {
            "consumerGroup": SYNCED_GROUP, "topic": topic, "queueId": str(queue_id)})
        if header.get("code") == 0:
            found[queue_id] = int(header["extFields"]["offset"])
    return found


def _slave_sync_errors(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if SLAVE_SYNC_ERROR.search(line)]


def _end(results) -> int:
    return max(decode_offset_msg_id(r.offset_msg_id)[2] for r in results) + 1


@contextmanager
def _ferrymq_master_of(apache: ApacheRocketMQ, ferry_port: int, tmp_path, *settings: str) -> Iterator[FerryProcess]:
    """``apache`` (its slave broker) started, then a FerryMQ master on ``ferry_port`` registered
    with its name server; both logged if the block fails, both stopped after it."""
    apache.start()
    master = None
    try:
        master = FerryProcess(
            ["broker", "--namesrv", apache.namesrv_addr, "--broker-port", str(ferry_port),
             "--data-dir", str(tmp_path / "master"), "--set", f"brokerName={BROKER_NAME}",
             "--set", f"brokerClusterName={CLUSTER}", "--set", f"mappedFileSizeCommitLog={SEGMENT}",
             *[arg for s in settings for arg in ("--set", s)]],
            "is ready on", tmp_path / "ferry-master.log").start()
        yield master
    except BaseException:
        apache.dump_logs()
        if master is not None:
            print(master.log()[-8000:])
        raise
    finally:
        if master is not None:
            master.stop()
        apache.stop()


@pytest.mark.slow  # about 30 s: waits for the slave's sync of the offsets (make test-slow)
def test_an_apache_slave_replicates_a_ferrymq_master(rocketmq_jars, java_client: JavaClient, tmp_path):
    ferry_port = free_port()  # its +1 (HA) is free too
    apache = ApacheRocketMQ(cluster_name=CLUSTER, broker_name=BROKER_NAME, broker_conf={
        "brokerId": "1", "brokerRole": "SLAVE", "haMasterAddress": f"127.0.0.1:{ferry_port + 1}",
        "mappedFileSizeCommitLog": str(SEGMENT), "registerNameServerPeriod": "10000",
    })
    with _ferrymq_master_of(apache, ferry_port, tmp_path, "brokerRole=SYNC_MASTER",
                            "syncFlushTimeout=10000") as master:
        topic = "FerryToApacheHA"
        asyncio.run(_create_topic(apache.namesrv_addr, topic))
        results = asyncio.run(_send(apache.namesrv_addr, topic, COUNT))
        assert {r.status for r in results} == {SendStatus.SEND_OK}  # each acknowledged by the Apache slave
        end = _end(results)
        apache_store = apache.workdir / "store"
        assert commit_log_range(apache_store, 0, end) == commit_log_range(tmp_path / "master", 0, end)

        # The Apache slave serves the Java consumer with the FerryMQ master gone: it learns the
        # topic from the master (SlaveSynchronize: GET_ALL_TOPIC_CONFIG, which FerryMQ answers).
        def slave_knows_topic() -> bool:
            header, _ = remoting_request(apache.broker_addr, GET_TOPIC_STATS_INFO, {"topic": topic})
            return header.get("code") == 0
        poll_until("the Apache slave synchronizing the topic from the FerryMQ master", slave_knows_topic, 60,
                   interval=0.5)
        # ... and the consumer offsets (GET_ALL_CONSUMER_OFFSET, whose dataVersion 4.9.7 ignores).
        committed = {0: 11, 3: 250}
        asyncio.run(_commit_on_master(apache.namesrv_addr, topic, committed))
        poll_until("the Apache slave copying the FerryMQ master's consumer offsets",
                   lambda: _offsets_on(apache.broker_addr, topic, committed) == committed, 60, interval=0.5)
        assert _slave_sync_errors(apache.log_dir / "broker.log") == []
        assert master.stop() == 0
        events = java_client.consume(apache.namesrv_addr, topic, expect_keys=[f"ha-key-{i}" for i in range(COUNT)],
                                     timeout_ms=90000)
        assert {e["key"] for e in events.of("received")} >= {f"ha-key-{i}" for i in range(COUNT)}


def test_a_ferrymq_slave_replicates_an_apache_master(rocketmq_jars, tmp_path):
    apache = ApacheRocketMQ(cluster_name=CLUSTER, broker_name=BROKER_NAME, broker_conf={
        "brokerRole": "SYNC_MASTER", "mappedFileSizeCommitLog": str(SEGMENT), "syncFlushTimeout": "10000",
    })
    apache.start()
    slave = None
    slave_dir = tmp_path / "slave"
    try:
        # No haMasterAddress: the slave takes the Apache master's haServerAddr from the Apache
        # name server's answer to its registration.
        slave = FerryProcess(
            ["broker", "--namesrv", apache.namesrv_addr, "--broker-port", str(free_port()),
             "--data-dir", str(slave_dir), "--set", f"brokerName={BROKER_NAME}",
             "--set", f"brokerClusterName={CLUSTER}", "--set", "brokerRole=SLAVE", "--set", "brokerId=1",
             "--set", f"mappedFileSizeCommitLog={SEGMENT}"],
            "is ready on", tmp_path / "ferry-slave.log").start()
        topic = "ApacheToFerryHA"
        asyncio.run(_create_topic(apache.namesrv_addr, topic))
        started = time.monotonic()
        results = asyncio.run(_send(apache.namesrv_addr, topic, COUNT))
        assert {r.status for r in results} == {SendStatus.SEND_OK}  # each acknowledged by the FerryMQ slave
        print(f"{COUNT} sends to the Apache SYNC_MASTER with a FerryMQ slave in {time.monotonic() - started:.1f} s")
        end = _end(results)
        assert commit_log_range(slave_dir, 0, end) == commit_log_range(apache.workdir / "store", 0, end)

        assert slave.stop() == 0
        with offline_store(slave_dir, tmp_path / "slave-copy", [f"mappedFileSizeCommitLog={SEGMENT}"]) as store:
            assert check_consume_queues_agree(store) >= COUNT
            for r in results:
                got = store.get_messages("g", topic, r.message_queue.queue_id, r.queue_offset, 1)
                assert got.records, f"queue {r.message_queue.queue_id} offset {r.queue_offset} missing on the slave"
    except BaseException:
        apache.dump_logs()
        if slave is not None:
            print(slave.log()[-8000:])
        raise
    finally:
        if slave is not None:
            slave.stop()
        apache.stop()


def test_the_java_push_consumer_reads_a_ferrymq_slave_after_its_master_is_killed(rocketmq_jars, java_client: JavaClient,
                                                                                  tmp_path):
    """kill -9 a FerryMQ master: the official Java push consumer finds only the FerryMQ slave in
    the route and consumes everything the master had acknowledged from it."""
    pair = BrokerPair(tmp_path, "SYNC_MASTER", ["slaveSynchronizeInterval=500"])
    try:
        pair.start_namesrv()
        pair.start_master()
        pair.start_slave()
        topic = "FerryHAJavaReader"
        cluster = "HACluster"

        async def produce() -> list:
            async with AdminClient(namesrv_addr=pair.namesrv) as admin:
                async def master_known():
                    try:
                        return await admin.master_addrs(cluster)
                    except MQClientError:
                        return None
                await wait_until(master_known, 30, "the master registered")
                await admin.create_topic(topic, read_queues=4, write_queues=4, cluster=cluster)
            producer = Producer("ha-java-producer", namesrv_addr=pair.namesrv)
            await producer.start()
            try:
                async def slave_acks():
                    return (await producer.send(Message(topic, b"probe", properties={"KEYS": "probe"}))).status \
                        is SendStatus.SEND_OK
                await wait_until(slave_acks, 30, "the slave connected", interval=0.2)
                return [await producer.send(Message(topic, f"m{i}".encode(), properties={"KEYS": f"java-ha-{i}"}))
                        for i in range(300)]
            finally:
                await producer.close()

        results = asyncio.run(produce())
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        slave = f"127.0.0.1:{pair.slave_port}"
        poll_until("the slave's copy of the topic config",
                   lambda: remoting_request(slave, GET_TOPIC_STATS_INFO, {"topic": topic})[0].get("code") == 0, 30)
        pair.processes["master"].kill()
        events = java_client.consume(pair.namesrv, topic, expect_keys=[f"java-ha-{i}" for i in range(300)],
                                     timeout_ms=60000)
        assert {e["key"] for e in events.of("received")} >= {f"java-ha-{i}" for i in range(300)}
    except BaseException:
        print(pair.logs())
        raise
    finally:
        pair.stop_all()


GET_TIMER_CHECK_POINT = 60


def _timer_checkpoint(addr: str) -> TimerCheckpointBody | None:
    header, body = remoting_request(addr, GET_TIMER_CHECK_POINT)
    return TimerCheckpointBody.decode(body) if header.get("code") == 0 else None


@pytest.mark.slow  # Apache 5.3.1 syncs a slave 60 s after its start, not configurable (make test-slow)
def test_an_apache_5_slave_follows_a_ferrymq_masters_timers(rocketmq5_jars, tmp_path):
    """docs/timers.md#slaves: Apache 5.3.1 as the slave of a FerryMQ master. Timer messages reach
    it by replication; every 3 s it copies the master's timer checkpoint (GET_TIMER_CHECK_POINT),
    so its own checkpoint's lastReadTimeMs follows how far the master fired, and it indexes the
    replicated timer records up to the master's masterTimerQueueOffset, counting the pending ones
    per topic as the master does.

    Its once-a-minute SlaveSynchronize (the first a minute after the slave started; 5.3.1 has no
    setting for it) copies everything without an error: the consumer offsets with their
    dataVersion (GET_ALL_CONSUMER_OFFSET), which it persists, and the message request modes
    (GET_ALL_MESSAGE_REQUEST_MODE, 402)."""
    ferry_port = free_port()  # its +1 (HA) is free too
    apache = ApacheRocketMQ(cluster_name=CLUSTER, broker_name=BROKER_NAME, broker_version=ROCKETMQ5_VERSION,
                            broker_conf={
                                # No haMasterAddress: 5.3.1 hands it to its HA client before that
                                # client exists (BrokerController.initializeBrokerScheduledTasks runs
                                # before DefaultMessageStore.start's haService.init) and then never
                                # connects; without it the slave takes the master's haServerAddr from
                                # its registration's answer, as a 4.9.7 slave can.
                                "brokerId": "1", "brokerRole": "SLAVE",
                                "mappedFileSizeCommitLog": str(SEGMENT), "registerNameServerPeriod": "10000",
                            })
    master_addr = f"127.0.0.1:{ferry_port}"
    with _ferrymq_master_of(apache, ferry_port, tmp_path, "brokerRole=ASYNC_MASTER"):
        async def send_timers() -> tuple[int, int]:
            await _create_topic(apache.namesrv_addr, "TimersSoon")
            await _create_topic(apache.namesrv_addr, "TimersLater")
            return await send_soon_and_later_timers(apache.namesrv_addr, 3000)
        soon, later = asyncio.run(send_timers())
        committed = {0: 2, 2: 1}
        asyncio.run(_commit_on_master(apache.namesrv_addr, "TimersLater", committed))
        _, after_commits = remoting_request(master_addr, GET_ALL_CONSUMER_OFFSET)

        async def pending(addr: str) -> dict[str, int]:
            async with AdminClient(namesrv_addr=apache.namesrv_addr) as admin:
                return {t: c.count for t, c in (await admin.timer_metrics(addr)).timing_count.items() if c.count}

        # The FerryMQ master fires the soon timers; its fired-up-to time passes their second.
        poll_until("the master fired the soon timers", lambda: asyncio.run(pending(master_addr)) == {"TimersLater": 3},
                   30, interval=0.5)
        fired = _timer_checkpoint(master_addr)
        assert fired.last_read_time_ms > soon and fired.master_timer_queue_offset == 8

        def slave_follows() -> TimerCheckpointBody | None:
            ours = _timer_checkpoint(apache.broker_addr)
            if ours is None or ours.last_read_time_ms < fired.last_read_time_ms:
                return None
            return ours if ours.last_timer_queue_offset == ours.master_timer_queue_offset == 8 else None
        ours = poll_until("the Apache slave's timer checkpoint following the FerryMQ master's", slave_follows, 60,
                          interval=0.5, diagnostics=lambda: f"slave: {_timer_checkpoint(apache.broker_addr)}")
        assert ours.last_read_time_ms <= _timer_checkpoint(master_addr).last_read_time_ms  # copied, not its own
        assert ours.last_read_time_ms < later
        # Every replicated timer is in the Apache slave's timer store, counted per real topic.
        assert asyncio.run(pending(apache.broker_addr))["TimersLater"] == 3

        # The slave's first full SlaveSynchronize round: its last copy is the request modes.
        slave_log = apache.log_dir / "rocketmqlogs" / "broker.log"
        poll_until("the Apache 5 slave's first SlaveSynchronize round",
                   lambda: "Update slave Message Request Mode from master" in slave_log.read_text(errors="replace")
                   or _slave_sync_errors(slave_log), 120, interval=1)
        assert _slave_sync_errors(slave_log) == []
        assert _offsets_on(apache.broker_addr, "TimersLater", committed) == committed
        # Persisted with the master's data version (the copy stopped short of both before).
        saved = rocketmq_json.loads((apache.workdir / "store" / "config" / "consumerOffset.json").read_text())
        assert saved["offsetTable"][f"TimersLater@{SYNCED_GROUP}"] == committed
        _, masters = remoting_request(master_addr, GET_ALL_CONSUMER_OFFSET)
        # The master's version as the slave copied it: the one after the commits, or a later one
        # (the master's table may move again before the comparison; CI saw it move twice).
        versions = [rocketmq_json.loads(body)["dataVersion"] for body in (after_commits, masters)]
        assert saved["dataVersion"] in versions
