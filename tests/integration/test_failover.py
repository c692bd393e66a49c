"""Failover (issue 13, item 5) with real processes on 127.0.0.1: a name server, a ``ferrymq
controller`` and two brokers of one group with enableControllerMode, SYNC_MASTER.

What users rely on: when the master is killed, the controller promotes the slave (it holds
everything acknowledged) within the failover timeout and producers go on through the route to
the new master; every message ever answered SEND_OK is readable from it; the old master, once
back, drops what it stored after the new epoch began (never acknowledged), rejoins as a slave
and ends byte-identical to the new master; random kill -9 of either broker under load loses no
acknowledged message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import time
import urllib.request
import zlib
from collections.abc import AsyncIterator

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.pull_service import PullStatus
from ferrymq.common.message import MESSAGE_MAGIC, Message, decode_record
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import (
    DataVersion,
    MessageQueue,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import QueryMessageHeader, ViewMessageHeader
from ferrymq.store.checkpoint import read_checkpoint
from tests.consumer_support import read_all
from testkit.failover import CLUSTER, GROUP, FailoverPair, FailoverTrio, controller_state, create_topic
from tests.integration.store_checks import check_consume_queues_agree, offline_store
from testkit.processes import SEGMENT
from tests.replication_support import AckedLoad, assert_acked_on_both, commit_log_range
from testkit.ports import free_port
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TOPIC = "FailoverTopic"
# kill -9 rounds of the chaos test: a few in make test, FERRYMQ_HA_KILLS=50 for the acceptance run.
KILLS = int(os.environ.get("FERRYMQ_HA_KILLS", "4"))


@pytest.fixture
def group(tmp_path):
    created: list[FailoverPair] = []

    def make(settings: list[str] | None = None, failover_timeout: int = 3000, role: str = "SYNC_MASTER") -> FailoverPair:
        p = FailoverPair(tmp_path, role, settings or [], failover_timeout=failover_timeout)
        created.append(p)
        p.start_namesrv()
        p.start_controller()
        return p

    yield make
    for p in created:
        print(p.logs())  # shown when the test failed
        p.stop_all()


async def send_all(producer: Producer, count: int, prefix: str, concurrency: int = 8) -> list:
    results: list = [None] * count
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            results[i] = await producer.send(Message(TOPIC, f"{prefix}-{i}-".encode() + bytes(40 + i % 300)))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def end_of(results) -> int:
    """The CommitLog offset just past the last of ``results`` (from offset msgIds)."""
    return max(decode_offset_msg_id(r.offset_msg_id)[2] for r in results) + 1


async def send_ok(producer: Producer) -> bool:
    try:
        return (await producer.send(Message(TOPIC, b"probe"))).status is SendStatus.SEND_OK
    except (MQClientError, RemotingError, OSError):
        return False


async def stored(producer: Producer) -> bool:
    """A send went through to a master (the producer found it through the route)."""
    try:
        result = await producer.send(Message(TOPIC, b"probe"))
    except (MQClientError, RemotingError, OSError):
        return False
    return result.status in (SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE, SendStatus.FLUSH_SLAVE_TIMEOUT)


async def route_master(namesrv: str, topic: str = TOPIC) -> str | None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        try:
            route = await admin.topic_route(topic)
        except MQClientError:
            return None
    return {b.broker_name: b.broker_addrs for b in route.broker_datas}.get(GROUP, {}).get(0)


async def master_of_epoch(p: FailoverPair, epoch: int, broker_id: int) -> dict | None:
    state = await controller_state(p.controller)
    return state if state.get("epoch") == epoch and state.get("masterId") == broker_id else None


async def acting(p: FailoverPair, broker_id: int, role: str, epoch: int) -> bool:
    state = await controller_state(p.controller)
    return any(b["brokerId"] == broker_id and b["acting"] == role and b["epoch"] == epoch
               for b in state.get("brokers", []))


async def bodies_on_master(namesrv: str) -> set[bytes]:
    """Every message body the group's master serves, read with a pull consumer from offset 0."""
    out: set[bytes] = set()
    async with PullConsumer("failover-readers", namesrv_addr=namesrv) as consumer:
        for mq in await consumer.fetch_queues(TOPIC):
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=32)
                if result.status is not PullStatus.FOUND:
                    break
                out.update(m.body for m in result.messages)
                offset = result.next_begin_offset
    return out


def record_bodies(store_dir) -> list[bytes]:
    """Bodies of every record in the CommitLog of ``store_dir``, in order."""
    out: list[bytes] = []
    for path in sorted((store_dir / "commitlog").iterdir()):
        data, offset = path.read_bytes(), 0
        while offset + 8 <= len(data):
            size = int.from_bytes(data[offset:offset + 4], "big")
            if size <= 0 or data[offset + 4:offset + 8] != MESSAGE_MAGIC.to_bytes(4, "big", signed=True):
                break  # the file's blank tail, or the end of the data
            out.append(decode_record(data[offset:offset + size])[0].body)
            offset += size
    return out


def test_the_slave_is_promoted_the_old_master_truncates_and_rejoins(group):
    """Freeze the in-sync slave, so the SYNC master stores messages it cannot get acknowledged
    (answered FLUSH_SLAVE_TIMEOUT: the in-sync set still names the slave); kill the master; the
    slave thaws and is promoted (epoch 2, from where its CommitLog ends); producers resume
    through the route. The old master comes back:
    it drops the unacknowledged messages (written after epoch 2 began), follows the new master,
    and its CommitLog ends byte-identical to it; every message answered SEND_OK is readable from
    the new master."""
    p = group(["syncFlushTimeout=2000"])
    p.http_ports = {"master": free_port(), "slave": free_port()}
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
        await producer.start()
        try:
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            acked = await send_all(producer, 300, "acked")
            assert {r.status for r in acked} == {SendStatus.SEND_OK}

            slave = p.processes["slave"].proc
            os.kill(slave.pid, signal.SIGSTOP)
            try:
                # 29 MB: more than the sockets between them buffer, so the slave cannot hold it all
                unacked = await asyncio.gather(*(producer.send(Message(TOPIC, f"unacked-{i}-".encode() + bytes(600_000)))
                                                 for i in range(48)))
                assert {r.status for r in unacked} == {SendStatus.FLUSH_SLAVE_TIMEOUT}
                old_end = end_of(unacked)  # stored on the old master all the same
                p.processes["master"].kill()
                killed = time.monotonic()
            finally:
                os.kill(slave.pid, signal.SIGCONT)
            await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2")
            promoted_after = time.monotonic() - killed
            await wait_until(lambda: _is(route_master(p.namesrv), p.addr("slave")), 30,
                             "the route naming broker 1 as the group's master")
            # Producers resume: stored on the new master (SLAVE_NOT_AVAILABLE: it has no slave yet).
            await wait_until(lambda: stored(producer), 30, "a send stored on the new master")
            resumed = await send_all(producer, 20, "resumed", concurrency=4)
            assert {r.status for r in resumed} <= {SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE}
            assert {r.message_queue.broker_name for r in resumed} == {GROUP}

            await asyncio.to_thread(p.start_master)
            await wait_until(lambda: acting(p, 0, "SLAVE", 2), 30, "the old master following as a slave")
            await wait_until(lambda: send_ok(producer), 30, "SYNC sends acknowledged again")
            final = await send_all(producer, 200, "final")
            assert {r.status for r in final} == {SendStatus.SEND_OK}
            on_master = await bodies_on_master(p.namesrv)
        finally:
            await producer.close()
        return acked, unacked, resumed, final, old_end, promoted_after, on_master

    acked, unacked, resumed, final, old_end, promoted_after, on_master = asyncio.run(scenario())
    print(f"broker 1 promoted {promoted_after:.1f} s after the master was killed (failoverTimeout 3 s)")
    state = asyncio.run(controller_state(p.controller))
    start = state["history"][-1]["startOffset"]
    assert [h["epoch"] for h in state["history"]] == [1, 2] and start < old_end
    assert "CommitLog truncated from offset" in p.processes["master"].log()

    # Metrics show who is what now, and the epoch.
    new_master, old_master = scrape(p.http_ports["slave"]), scrape(p.http_ports["master"])
    assert re.search(r'ferrymq_broker_role\{[^}]*role="SYNC_MASTER"\} 1\.0', new_master)
    assert re.search(r'ferrymq_broker_role\{[^}]*role="SLAVE"\} 1\.0', old_master)
    for text in (new_master, old_master):
        assert re.search(r"ferrymq_broker_replication_epoch\{[^}]*\} 2\.0", text)

    # Every acknowledged message is readable from the new master; the unacknowledged ones
    # written on the old master after epoch 2 began are gone from both.
    bodies = {r_body for r_body in on_master}
    for prefix, results in (("acked", acked), ("final", final)):
        for i, r in enumerate(results):
            assert any(b.startswith(f"{prefix}-{i}-".encode()) for b in bodies), f"{prefix}-{i} lost"
    end = end_of(final)
    assert commit_log_range(p.master_dir, 0, end) == commit_log_range(p.slave_dir, 0, end)
    assert len(commit_log_range(p.master_dir, 0, end)) == end
    old_master_bodies = record_bodies(p.master_dir)
    # Unacknowledged messages the slave had received before it froze survive on both; the rest
    # (the old master wrote them after epoch 2 began) are gone from both.
    kept = [b for b in old_master_bodies if b.startswith(b"unacked-")]
    assert kept == [b for b in record_bodies(p.slave_dir) if b.startswith(b"unacked-")]
    assert len(kept) < len(unacked)
    assert sum(b.startswith(b"resumed-") for b in old_master_bodies) == len(resumed)

    # The old master's ConsumeQueues were cut with its CommitLog: they agree after a clean stop.
    assert p.processes["master"].stop() == 0
    with offline_store(p.master_dir, p.tmp / "old-master-copy", [f"mappedFileSizeCommitLog={SEGMENT}"]) as store:
        assert check_consume_queues_agree(store) == len(old_master_bodies)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


async def healed(p: FailoverPair) -> bool:
    """Both brokers up, and the one that is not master in the master's in-sync set."""
    state = await controller_state(p.controller)
    return state.get("inSync") == [1 - state.get("masterId", 0)]


async def _epoch_above(p: FailoverPair, epoch: int) -> bool:
    return (await controller_state(p.controller)).get("epoch", 0) > epoch


def test_an_async_group_fails_over_and_the_new_master_acknowledges_alone(group):
    """ASYNC_MASTER: a send is acknowledged once the master stored it, so the new master answers
    SEND_OK with no slave at all; what the old master had copied to its slave before it was
    killed (here: all of it, the load paused first) survives the failover."""
    p = group(role="ASYNC_MASTER")
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=10, retry_times=0)
        await producer.start()
        try:
            before = await send_all(producer, 200, "before")
            assert {r.status for r in before} == {SendStatus.SEND_OK}
            end = end_of(before)

            def copied() -> bool:
                return commit_log_range(p.slave_dir, 0, end + 1) == commit_log_range(p.master_dir, 0, end + 1)
            await wait_until(copied, 30, "the slave holding what the master acknowledged")
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            p.processes["master"].kill()
            await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2")
            await wait_until(lambda: send_ok(producer), 30, "SEND_OK from the new master, alone")
            after = await send_all(producer, 100, "after")
            assert {r.status for r in after} == {SendStatus.SEND_OK}
            assert await _is(route_master(p.namesrv), p.addr("slave"))
            # The deposed master's registration of epoch 1 arriving late (a request stuck in its
            # socket while it was cut off): the name server keeps the route on epoch 2's master.
            assert (await register_late(p.namesrv, p.addr("master"), epoch=1)).code == ResponseCode.SUCCESS
            assert await _is(route_master(p.namesrv), p.addr("slave"))
            on_master = await bodies_on_master(p.namesrv)
        finally:
            await producer.close()
        return on_master

    on_master = asyncio.run(scenario())
    assert sum(b.startswith(b"before-") for b in on_master) == 200
    assert sum(b.startswith(b"after-") for b in on_master) == 100


async def register_late(namesrv: str, addr: str, epoch: int) -> RemotingCommand:
    """REGISTER_BROKER as brokerId 0 of the group at ``addr``, of master epoch ``epoch``."""
    wrapper = TopicConfigSerializeWrapper({TOPIC: TopicConfig(TOPIC, 4, 4)}, DataVersion(state_version=epoch))
    body = RegisterBrokerBody(wrapper).to_json()
    client = RemotingClient()
    try:
        return await client.invoke(namesrv, RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerAddr": addr, "brokerName": GROUP, "clusterName": CLUSTER, "brokerId": 0,
            "haServerAddr": addr, "compressed": False, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body), 5)
    finally:
        await client.close()


async def in_sync(p: FailoverPair, *members: int) -> bool:
    """The controller has committed exactly ``members`` as the master's in-sync slaves."""
    return (await controller_state(p.controller)).get("inSync") == sorted(members)


async def slave_links_in_sync(p: FailoverPair) -> list[bool]:
    """``inSync`` of each slave link in the master's runtime info (ferrymqHaSlaves); [] until all are."""
    async with AdminClient(namesrv_addr=p.namesrv) as admin:
        links = json.loads((await admin.broker_runtime_info(p.addr("master"))).get("ferrymqHaSlaves") or "[]")
    flags = [link.get("inSync") for link in links]
    return flags if flags and all(flag is True for flag in flags) else []


@contextlib.asynccontextmanager
async def producer_once_in_sync(p: FailoverPair, queues: int = 4, **options) -> AsyncIterator[Producer]:
    """A started producer of TOPIC, once the slave is in the master's in-sync set."""
    await create_topic(p.namesrv, TOPIC, queues=queues)
    producer = Producer("failover-producer", namesrv_addr=p.namesrv, **options)
    await producer.start()
    try:
        await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
        yield producer
    finally:
        await producer.close()


@pytest.mark.slow  # 25 s or more (make test-slow)
def test_the_controller_killed_for_long_loses_no_send_and_restarted_keeps_the_epochs(group):
    """The controller decides failover only: while it is down (kill -9, for ten failover
    timeouts) the master keeps acknowledging every send, as its in-sync slave keeps up; the
    restarted controller reads its epochs and in-sync set back (no election, the same master)."""
    p = group(["syncFlushTimeout=2000"], failover_timeout=2000)
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        try:
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            # The master's runtime info says so per link (the operator restarts a master only once
            # its slaves are promotable).
            await wait_until(lambda: slave_links_in_sync(p), 30, "the master's link to the slave shown in sync")
            p.processes["controller"].kill()
            down_until = time.monotonic() + 10 * p.failover_timeout / 1000
            results = []
            while time.monotonic() < down_until:  # every send answered SEND_OK, none refused
                results += await send_all(producer, 20, f"down-{len(results)}", concurrency=4)
            await asyncio.to_thread(p.start_controller)
            await wait_until(lambda: master_of_epoch(p, 1, 0), 30, "the restarted controller: broker 0 master")
            results += await send_all(producer, 50, "after")
            state = await controller_state(p.controller)
        finally:
            await producer.close()
        return results, state

    results, state = asyncio.run(scenario())
    assert len(results) >= 100
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert [(h["epoch"], h["masterId"]) for h in state["history"]] == [(1, 0)]
    assert state["inSync"] == [1]
    assert "taking no sends" not in p.processes["master"].log()


def test_without_the_controller_a_master_that_loses_its_last_in_sync_slave_fences_itself(group):
    """Both the controller and the in-sync slave gone (killed; the slave frozen): another broker
    might be elected, so the master refuses sends and closes its clients' connections; when the
    slave thaws and reconnects in the same epoch it takes sends again, the controller still down."""
    p = group(["syncFlushTimeout=1000", "haHousekeepingInterval=2000", "haSendHeartbeatInterval=500"],
              failover_timeout=2000)
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        try:
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            p.processes["controller"].kill()
            slave = p.processes["slave"].proc
            os.kill(slave.pid, signal.SIGSTOP)

            async def refused() -> str | None:
                try:
                    await producer.send(Message(TOPIC, b"cut off"))
                except (MQClientError, RemotingError, OSError) as exc:
                    return str(exc) if "no in-sync slave" in str(exc) else None
                return None
            try:
                await wait_until(refused, 30, "the cut-off master refusing sends")
            finally:
                os.kill(slave.pid, signal.SIGCONT)
            await wait_until(lambda: send_ok(producer), 30, "SEND_OK again with the slave back")
        finally:
            await producer.close()

    asyncio.run(scenario())
    log = p.processes["master"].log()
    assert "no in-sync slave connected" in log and "closing" in log and "client connection" in log


def test_with_two_slaves_one_is_promoted_and_the_other_and_the_old_master_follow_it(tmp_path):
    """Three brokers: the master is killed under SYNC load; the slave with the most data is
    promoted, the other slave follows it (cutting what the new master never had), the old master
    comes back as a slave under the id the new master left free; at the end all three hold the
    same CommitLog and every acknowledged message."""
    p = FailoverTrio(tmp_path, "SYNC_MASTER", ["syncFlushTimeout=2000"])
    try:
        p.start_namesrv()
        p.start_controller()
        p.start_master()
        p.start_slave()
        p.start_slave2()

        async def scenario():
            await create_topic(p.namesrv, TOPIC)
            producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
            await producer.start()
            acked: list = []
            stop = asyncio.Event()

            async def load() -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    body = f"load-{n}-{time.monotonic_ns()}".encode()
                    try:
                        r = await producer.send(Message(TOPIC, body))
                    except (MQClientError, RemotingError, OSError):
                        await asyncio.sleep(0.05)  # pacing while there is no master, not synchronisation
                        continue
                    if r.status is SendStatus.SEND_OK:
                        acked.append((r, body))
            try:
                await wait_until(lambda: in_sync(p, 1, 2), 30, "both slaves in the master's in-sync set")
                loaders = [asyncio.ensure_future(load()) for _ in range(4)]
                await wait_until(lambda: len(acked) >= 200, 60, "acknowledged sends under load")
                p.processes["master"].kill()
                async def promoted():
                    st = await controller_state(p.controller)
                    return st if st.get("epoch", 0) > 1 else None
                state = await wait_until(promoted, 30, "a slave promoted")
                new_master = "slave" if state["masterId"] == 1 else "slave2"
                other = "slave2" if new_master == "slave" else "slave"
                await wait_until(lambda: acting(p, 2 if other == "slave2" else 1, "SLAVE", 2), 30,
                                 "the other slave following the new master")
                await asyncio.to_thread(p.start_master)
                await wait_until(lambda: acting(p, 0, "SLAVE", 2), 30, "the old master following as a slave")
                seen = len(acked)
                await wait_until(lambda: len(acked) >= seen + 200, 60, "acknowledged sends after the failover")
                stop.set()
                await asyncio.gather(*loaders)
                on_master = await bodies_on_master(p.namesrv)
                route = None
                async with AdminClient(namesrv_addr=p.namesrv) as admin:
                    route = await admin.topic_route(TOPIC)
            finally:
                stop.set()
                await producer.close()
            return acked, on_master, new_master, route

        acked, on_master, new_master, route = asyncio.run(scenario())
        addrs = {b.broker_name: b.broker_addrs for b in route.broker_datas}[GROUP]
        old_master_id = {v: k for k, v in addrs.items()}[p.addr("master")]
        assert addrs[0] == p.addr(new_master) and old_master_id == (1 if new_master == "slave" else 2)
        end = max(decode_offset_msg_id(r.offset_msg_id)[2] for r, _ in acked) + 1

        def level() -> bool:
            ref = commit_log_range(p.dir(new_master), 0, end + 1)
            return all(commit_log_range(p.dir(n), 0, end + 1) == ref for n in ("master", "slave", "slave2"))
        asyncio.run(wait_until(level, 30, "the three CommitLogs level"))
        missing = {body for _, body in acked} - on_master
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages not on the new master"
        print(f"{len(acked)} acknowledged, all on the new master ({new_master}); three CommitLogs level")
    finally:
        print(p.logs())
        p.stop_all()


async def _is(value, expected) -> bool:
    return (await value) == expected


@pytest.mark.slow
def test_random_kill_9_with_failover_on_loses_nothing_acknowledged(group):
    """SYNC_MASTER under continuous load, failover on, while either broker (at random) is
    killed -9 and restarted, KILLS times: masters change whenever the controller finds one
    silent for the failover timeout; every message acknowledged SEND_OK is, at the end, in both
    CommitLogs where its offset msgId says, byte-identical between them."""
    p = group(["syncFlushTimeout=2000"], failover_timeout=2000)
    p.start_master()
    p.start_slave()
    rng = random.Random(int(os.environ.get("FERRYMQ_HA_SEED", "13")))

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-chaos", namesrv_addr=p.namesrv, send_timeout=3, retry_times=0)
        await producer.start()
        failovers = 0
        try:
            async with AckedLoad(producer, TOPIC) as load:
                for round_ in range(KILLS):
                    target = rng.choice(["master", "slave"])
                    await load.more(20, 90, f"acknowledged sends before kill {round_ + 1}")
                    await wait_until(lambda: healed(p), 60, "the other broker in the master's in-sync set")
                    state = await controller_state(p.controller)
                    p.processes[target].kill()
                    if state["masterId"] == (0 if target == "master" else 1) and rng.random() < 0.75:
                        # Mostly the killed master stays down until the other broker is promoted (if it
                        # is in sync: under load it may still be catching up after its own restart).
                        try:
                            await wait_until(lambda: _epoch_above(p, state["epoch"]), 4 * p.failover_timeout / 1000,
                                             "the other broker promoted", interval=0.05)
                            failovers += 1
                        except AssertionError:  # not promoted in time: no failover this round, no failure
                            pass
                    await asyncio.to_thread(p.start_master if target == "master" else p.start_slave)
                await load.more(20, 90, "acknowledged sends after the last restart")
        finally:
            await producer.close()
        return load.acked, failovers

    acked, failovers = asyncio.run(scenario())
    state = asyncio.run(controller_state(p.controller))
    assert len(state["history"]) - 1 >= failovers and (failovers > 0 or KILLS < 4)
    end = max(phys for phys, _ in acked) + 1

    def in_step() -> bool:
        return commit_log_range(p.master_dir, 0, end) == commit_log_range(p.slave_dir, 0, end)
    asyncio.run(wait_until(in_step, 30, "both brokers holding the same CommitLog after the last round"))
    assert_acked_on_both(acked, p.master_dir, p.slave_dir)
    print(f"{KILLS} kills, {len(state['history']) - 1} failovers (epoch {state['epoch']}), {len(acked)} acknowledged "
          f"messages all on both brokers")


def test_a_master_cut_off_from_the_controller_stops_taking_sends_and_steps_down(group):
    """The master loses the controller (a proxy that stops forwarding) but not its slave nor its
    clients: it goes on acknowledging with its in-sync slave until the controller promotes that
    slave; then, cut off from both, it fences itself, and no two masters acknowledge at once. When the link is back the controller tells the old master
    it was replaced: it stops (exit code 3); restarted, it rejoins as a slave. Everything ever
    acknowledged is on the new master."""
    p = group(["syncFlushTimeout=2000"])

    async def scenario():
        from tests.replication_support import TcpProxy
        proxy = await TcpProxy(p.controller).start()
        try:
            await asyncio.to_thread(p.start_master, f"controllerAddr={proxy.address}")
            await asyncio.to_thread(p.start_slave)
            await create_topic(p.namesrv, TOPIC)
            producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
            await producer.start()
            acked: list = []
            acked_during: list[bytes] = []
            try:
                await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
                acked += await send_all(producer, 100, "before")
                assert {r.status for r in acked} == {SendStatus.SEND_OK}

                proxy.cut()
                refused = None
                deadline = time.monotonic() + 30
                during = iter(range(10**6))
                # Pinned to a queue: a send that is refused or meets a dropped connection ends there
                # (an unpinned one would wait for the route and land on the new master).
                pinned = MessageQueue(TOPIC, GROUP, 0)
                while refused is None and time.monotonic() < deadline:  # each send answered or refused
                    body = f"during-{next(during)}".encode()
                    try:
                        r = await producer.send(Message(TOPIC, body), queue=pinned)
                        if r.status is SendStatus.SEND_OK:
                            acked.append(r)
                            acked_during.append(body)
                    except MQClientError as exc:
                        if "lost the controller" in str(exc) or "another broker is master" in str(exc):
                            refused = str(exc)
                assert refused, "the cut-off master kept taking sends"
                await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2")
                await wait_until(lambda: stored(producer), 30, "sends reaching the new master")

                proxy.restore()
                code = await asyncio.to_thread(p.processes["master"].proc.wait, 30)
                assert code == 3 and "replaced as master" in p.processes["master"].log()
                await asyncio.to_thread(p.start_master, f"controllerAddr={proxy.address}")
                await wait_until(lambda: acting(p, 0, "SLAVE", 2), 30, "the old master following as a slave")
                await wait_until(lambda: send_ok(producer), 30, "SYNC sends acknowledged again")
                acked += await send_all(producer, 100, "after")
                on_master = await bodies_on_master(p.namesrv)
            finally:
                await producer.close()
        finally:
            await proxy.stop()
        return acked, acked_during, on_master

    acked, acked_during, on_master = asyncio.run(scenario())
    assert {r.status for r in acked} == {SendStatus.SEND_OK}
    assert sum(b.startswith(b"before-") for b in on_master) == 100
    assert sum(b.startswith(b"after-") for b in on_master) == 100
    # Acknowledged during the cut (by the old master before its lease ran out): on the new one.
    assert set(acked_during) <= on_master
    end = max(decode_offset_msg_id(r.offset_msg_id)[2] for r in acked) + 1
    assert commit_log_range(p.master_dir, 0, end) == commit_log_range(p.slave_dir, 0, end)


def test_min_in_sync_replicas_refuses_sends_until_the_set_is_big_enough(group):
    """minInSyncReplicas=2: the master alone refuses sends ("in-sync replicas not enough",
    nothing stored); once its slave is in the in-sync set they are acknowledged."""
    p = group(["syncFlushTimeout=2000", "minInSyncReplicas=2"])
    p.start_master()

    async def scenario():
        await create_topic(p.namesrv, TOPIC)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        try:
            with pytest.raises(MQClientError, match="in-sync replicas not enough"):
                await producer.send(Message(TOPIC, b"too few replicas"))
            await asyncio.to_thread(p.start_slave)
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            results = await send_all(producer, 20, "enough")
            on_master = await bodies_on_master(p.namesrv)
        finally:
            await producer.close()
        return results, on_master

    results, on_master = asyncio.run(scenario())
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert b"too few replicas" not in on_master and sum(b.startswith(b"enough-") for b in on_master) == 20


def test_consumers_read_only_what_every_in_sync_slave_holds(group):
    """The read half of the in-sync guarantee (RocketMQ 5's confirm offset): with the in-sync
    slave frozen, a send is stored on the master but not acknowledged (FLUSH_SLAVE_TIMEOUT);
    consumers must not read it, since a failover to that slave would take it back: neither a
    pull nor a pull held by long polling gets it. Once the slave holds it again it is readable
    and the held pull wakes with it."""
    p = group(["syncFlushTimeout=1000"])
    p.start_master()
    p.start_slave()

    async def scenario():
        await create_topic(p.namesrv, TOPIC, queues=1)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        consumer = PullConsumer("failover-readers", namesrv_addr=p.namesrv)
        await consumer.start()
        try:
            await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
            acked = await send_all(producer, 10, "confirmed", concurrency=1)
            assert {r.status for r in acked} == {SendStatus.SEND_OK}
            (mq,) = await consumer.fetch_queues(TOPIC)
            slave = p.processes["slave"].proc
            os.kill(slave.pid, signal.SIGSTOP)
            try:
                unconfirmed = await producer.send(Message(TOPIC, b"unconfirmed"))
                assert unconfirmed.status is SendStatus.FLUSH_SLAVE_TIMEOUT
                seen = await bodies_on_master(p.namesrv)
                held = asyncio.create_task(consumer.pull(mq, 10, max_nums=32, suspend=20))
                await asyncio.sleep(2)  # the pull is held on the master meanwhile
                assert not held.done(), "a held pull was answered with a message no in-sync slave holds"
            finally:
                os.kill(slave.pid, signal.SIGCONT)
            woken = await asyncio.wait_for(held, 30)
            seen_after = await bodies_on_master(p.namesrv)
        finally:
            await consumer.close()
            await producer.close()
        return seen, woken, seen_after

    seen, woken, seen_after = asyncio.run(scenario())
    assert sum(b.startswith(b"confirmed-") for b in seen) == 10 and b"unconfirmed" not in seen
    assert woken.status is PullStatus.FOUND and [m.body for m in woken.messages] == [b"unconfirmed"]
    assert b"unconfirmed" in seen_after


def test_a_restarted_broker_serves_no_pulls_until_the_controller_gave_it_its_role(group):
    """A broker in controller mode that restarts may hold messages the group will cut (written
    after a new epoch began elsewhere): until the controller has said what it is, it refuses
    pulls and POP receives with a clear remark instead of serving them; then it serves them as
    master."""
    p = group(["syncFlushTimeout=1000"])
    p.start_master()

    async def raw_pull(client: RemotingClient) -> RemotingCommand:
        return await client.invoke(p.addr("master"), RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "failover-readers", "topic": TOPIC, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
            "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))

    async def raw_pop(client: RemotingClient) -> RemotingCommand:
        return await client.invoke(p.addr("master"), RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "failover-poppers", "topic": TOPIC, "queueId": -1, "maxMsgNums": 32,
            "invisibleTime": 60_000, "pollTime": 0, "bornTime": 0, "initMode": 0}))

    async def scenario():
        await create_topic(p.namesrv, TOPIC, queues=1)
        producer = Producer("failover-producer", namesrv_addr=p.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        client = RemotingClient()
        try:
            sent = await send_all(producer, 5, "kept", concurrency=1)
            assert (await raw_pull(client)).code == ResponseCode.SUCCESS
            assert p.processes["master"].stop() == 0
            p.processes["controller"].kill()
            await asyncio.to_thread(p.start_master)  # no controller to answer it
            waiting = [await raw_pull(client), await raw_pop(client)]
            await asyncio.to_thread(p.start_controller)
            await wait_until(lambda: acting(p, 0, "MASTER", 1), 30, "the broker master again")
            served = [await raw_pull(client), await raw_pop(client)]
        finally:
            await client.close()
            await producer.close()
        return sent, waiting, served

    sent, waiting, served = asyncio.run(scenario())
    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    for refused in waiting:
        assert refused.code == ResponseCode.NO_PERMISSION and "waits for the controller" in refused.remark
    assert [r.code for r in served] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]


def test_sends_while_the_only_master_is_replaced_wait_for_the_new_route_and_succeed(group):
    """The master killed under a producer with a generous send timeout: its sends find no
    reachable master, then no route at all (the name server dropped it), and wait for the route
    to come back instead of failing at once; once the slave is promoted they all go through."""
    p = group(failover_timeout=2000)
    p.start_master()
    p.start_slave()

    async def scenario():
        async with producer_once_in_sync(p, send_timeout=60, retry_times=2) as producer:
            assert (await producer.send(Message(TOPIC, b"before"))).status is SendStatus.SEND_OK
            p.processes["master"].kill()
            during = [asyncio.create_task(producer.send(Message(TOPIC, f"during-{i}".encode()))) for i in range(20)]
            await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2")
            return await asyncio.gather(*during, return_exceptions=True)

    results = asyncio.run(scenario())
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, failed
    assert {r.status for r in results} <= {SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE}
    assert {decode_offset_msg_id(r.offset_msg_id)[1] for r in results} == {int(p.addr("slave").rsplit(":", 1)[1])}


def test_a_master_shut_down_hands_over_to_its_in_sync_slave_at_once(group):
    """A controlled shutdown (SIGTERM, as a rolling upgrade sends): the master stops taking
    sends, waits until its in-sync slave holds everything, and the controller promotes that
    slave at once instead of a failover timeout after the master fell silent (60 s here: only a
    hand-over promotes it within the 30 s waited). Sends made meanwhile wait for the new route
    and succeed; every acknowledged message is on the new master; the old one, restarted,
    follows it without truncating anything."""
    p = group(["syncFlushTimeout=2000"], failover_timeout=60_000)
    p.start_master()
    p.start_slave()

    async def scenario():
        async with producer_once_in_sync(p, send_timeout=30, retry_times=2) as producer:
            acked = await send_all(producer, 200, "before")
            stopping = asyncio.ensure_future(asyncio.to_thread(p.processes["master"].stop))
            during = [asyncio.create_task(producer.send(Message(TOPIC, f"during-{i}-".encode()))) for i in range(20)]
            await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2 (a hand-over)")
            code = await stopping
            during = await asyncio.gather(*during, return_exceptions=True)
            await asyncio.to_thread(p.start_master)
            await wait_until(lambda: acting(p, 0, "SLAVE", 2), 30, "the old master following broker 1")
            await wait_until(lambda: in_sync(p, 0), 30, "the old master in the new master's in-sync set")
            after = await send_all(producer, 50, "after")
            on_master = await bodies_on_master(p.namesrv)
        return acked, during, after, code, on_master

    acked, during, after, code, on_master = asyncio.run(scenario())
    assert code == 0
    assert "hands over as it shuts down" in p.processes["controller"].log()
    failed = [r for r in during if isinstance(r, BaseException)]
    assert not failed, failed
    assert {r.status for r in acked + after} == {SendStatus.SEND_OK}
    for prefix, results in (("before", acked), ("during", during), ("after", after)):
        for i, _ in enumerate(results):
            assert any(b.startswith(f"{prefix}-{i}-".encode()) for b in on_master), f"{prefix}-{i} lost"
    assert "CommitLog truncated" not in p.processes["master"].log()


def test_a_slave_shut_down_leaves_the_in_sync_set_at_once(group):
    """A controlled shutdown of the slave (SIGTERM, as a rolling upgrade restarts it first): it
    tells the master it is leaving, the master has the controller take it out of the in-sync
    set and acknowledges alone meanwhile, instead of holding every SYNC send for the slave until
    haMaxTimeSlaveNotCatchup (60 s here) or syncFlushTimeout (30 s) ends it. Restarted, the slave
    catches up and is taken back in; nothing acknowledged is lost."""
    p = group(["syncFlushTimeout=30000", "haMaxTimeSlaveNotCatchup=60000"])
    p.start_master()
    p.start_slave()

    async def scenario():
        async with producer_once_in_sync(p, send_timeout=40, retry_times=0) as producer:
            acked = await send_all(producer, 100, "before")
            assert p.processes["slave"].stop() == 0
            await wait_until(lambda: in_sync(p), 20, "the in-sync set without the stopped slave")
            alone = await asyncio.wait_for(send_all(producer, 50, "alone"), 20)
            await asyncio.to_thread(p.start_slave)
            await wait_until(lambda: in_sync(p, 1), 30, "the restarted slave back in the in-sync set")
            after = await send_all(producer, 50, "after")
            on_master = await bodies_on_master(p.namesrv)
        return acked + alone + after, on_master

    results, on_master = asyncio.run(scenario())
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert "is shutting down: proposing the in-sync set without it" in p.processes["master"].log()
    assert len(on_master) >= len(results)


def test_a_restarted_broker_finds_by_key_or_id_only_what_its_in_sync_slave_held(group):
    """The master stores a message its frozen in-sync slave never gets (FLUSH_SLAVE_TIMEOUT): it
    lies past the confirm offset, which the checkpoint keeps. Killed and restarted with the
    controller away (so it waits for its role, and a failover may yet cut that message), the
    broker finds it neither by key nor by offset msgId, while the acknowledged one is found."""
    p = group(["syncFlushTimeout=1000"])
    p.start_master()
    p.start_slave()

    def confirm_offset(store_dir) -> int:
        return read_checkpoint(store_dir / "checkpoint")["confirmPhyOffset"]

    async def lookups(client: RemotingClient, result) -> tuple[int, int]:
        addr = p.addr("master")
        offset = decode_offset_msg_id(result.offset_msg_id)[2]
        viewed = await client.invoke(addr, ViewMessageHeader(offset=offset).request(RequestCode.VIEW_MESSAGE_BY_ID))
        queried = await client.invoke(addr, QueryMessageHeader(
            topic=TOPIC, key=result.msg_id, max_num=32, begin_timestamp=0, end_timestamp=2 ** 62,
            unique_key_query="true").request(RequestCode.QUERY_MESSAGE))
        return viewed.code, queried.code

    async def scenario():
        client = RemotingClient()
        try:
            async with producer_once_in_sync(p, queues=1, send_timeout=10, retry_times=0) as producer:
                acked = await producer.send(Message(TOPIC, b"held by both"))
                assert acked.status is SendStatus.SEND_OK
                slave = p.processes["slave"].proc
                os.kill(slave.pid, signal.SIGSTOP)
                try:
                    unacked = await producer.send(Message(TOPIC, b"on the master only"))
                    assert unacked.status is SendStatus.FLUSH_SLAVE_TIMEOUT
                    acked_end = end_of([acked])
                    await wait_until(lambda: confirm_offset(p.master_dir) >= acked_end, 30,
                                     "the confirm offset in the master's checkpoint")
                    assert await lookups(client, unacked) == (ResponseCode.SYSTEM_ERROR, ResponseCode.QUERY_NOT_FOUND)
                    p.processes["controller"].kill()
                    p.processes["master"].kill()
                finally:
                    os.kill(slave.pid, signal.SIGCONT)
            await asyncio.to_thread(p.start_master)  # no controller to tell it its role
            return await lookups(client, acked), await lookups(client, unacked)
        finally:
            await client.close()

    found, hidden = asyncio.run(scenario())
    assert found == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert hidden == (ResponseCode.SYSTEM_ERROR, ResponseCode.QUERY_NOT_FOUND)


TIMER_TOPIC_USER = "TimerFailoverTopic"


def timer_fired_ms(store_dir) -> int:
    """The fired-up-to time in a broker's timer checkpoint file (docs/timers.md), 0 if none yet."""
    try:
        return int.from_bytes((store_dir / "timer" / "checkpoint").read_bytes()[:8], "big")
    except FileNotFoundError:
        return 0


async def timer_deliveries(namesrv: str) -> dict[str, list[int]]:
    """UNIQ_KEY -> store times of every copy of it the group's master serves in the timer topic."""
    out: dict[str, list[int]] = {}
    for m in await read_all(namesrv, TIMER_TOPIC_USER, "timer-failover-readers"):
        out.setdefault(m.client_msg_id, []).append(m.store_timestamp)
    return out


@pytest.mark.slow  # 25 s or more (make test-slow)
def test_a_promoted_slave_fires_the_pending_timers_and_not_the_fired_ones_again(group):
    """Timer messages (docs/timers.md#slaves): the slave copies its master's timer checkpoint,
    so once promoted it delivers every timer still pending, none before its time, and none the
    old master delivered already (each UNIQ_KEY once in the topic)."""
    p = group()
    p.start_master()
    p.start_slave()
    early_count, late_count = 12, 12

    async def scenario():
        await create_topic(p.namesrv, TIMER_TOPIC_USER)
        await wait_until(lambda: in_sync(p, 1), 30, "the slave in the master's in-sync set")
        due: dict[str, int] = {}
        async with Producer("timer-failover-producer", namesrv_addr=p.namesrv, send_timeout=10) as producer:
            start = int(time.time() * 1000)
            early_due, late_due = start + 3000, start + 20_000
            for i in range(early_count + late_count):
                at = early_due if i < early_count else late_due
                sent = await producer.send(Message(TIMER_TOPIC_USER, f"t{i}".encode(),
                                                   properties={"TIMER_DELIVER_MS": str(at)}))
                assert sent.status is SendStatus.SEND_OK
                due[sent.msg_id] = at
        early = {k for k, at in due.items() if at == early_due}

        async def early_delivered():
            got = await timer_deliveries(p.namesrv)
            return early <= set(got)
        await wait_until(early_delivered, 30, "the master delivered the early timers")
        # The slave copied a checkpoint past the early timers' slot (every 3 s).
        await wait_until(lambda: timer_fired_ms(p.slave_dir) > early_due, 30, "the slave's timer checkpoint")
        assert not set(await timer_deliveries(p.namesrv)) - early, "a late timer was delivered early"
        p.processes["master"].kill()
        killed_at = int(time.time() * 1000)
        await wait_until(lambda: master_of_epoch(p, 2, 1), 30, "broker 1 master of epoch 2")
        await wait_until(lambda: _is(route_master(p.namesrv, TIMER_TOPIC_USER), p.addr("slave")), 30,
                         "the route naming broker 1 as the topic's master")

        async def all_delivered():
            got = await timer_deliveries(p.namesrv)
            return got if set(due) <= set(got) else None
        got = await wait_until(all_delivered, 60, "every timer delivered by the promoted slave")
        return due, early, got, killed_at, late_due

    due, early, got, killed_at, late_due = asyncio.run(scenario())
    assert killed_at < late_due, "the master was killed after the late timers were due: too slow to tell"
    duplicated = {k: len(times) for k, times in got.items() if len(times) > 1}
    assert not duplicated, f"delivered again by the promoted slave: {len(duplicated)} of {len(early)} early timers"
    too_early = {k: due[k] - min(times) for k, times in got.items() if min(times) < due[k]}
    assert not too_early, f"delivered before their time (ms early): {too_early}"
    late_on_new_master = [min(got[k]) for k in due if k not in early]
    assert min(late_on_new_master) >= killed_at  # the late ones came from the promoted slave
