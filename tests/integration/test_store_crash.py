"""kill -9 under load: a ``ferrymq standalone`` subprocess is killed at random moments while
concurrent producers send to it, then restarted, over and over.

SYNC_FLUSH: after every restart every acknowledged message is readable byte-identical at its
acknowledged queue offset, queue offsets are dense (no gap, no duplicate), and the
ConsumeQueues agree with the CommitLog (checked offline on a copy of the killed store,
recovered exactly as the broker then recovers it).

ASYNC_FLUSH: a kill -9 loses nothing either (the page cache survives a process crash), so
the test also simulates a power cut at the moment of the kill: on a copy of the killed
store the CommitLog is cut at the offset its last fsync covered (the checkpoint records it
after every fsync), i.e. it assumes the kernel wrote back nothing since. It reports how
many acknowledged messages that loses and how old their acknowledgements were; they are
exactly the ones acknowledged after that fsync (bounded by flushIntervalCommitLog while
at least flushCommitLogLeastPages pages are dirty, by flushCommitLogThoroughInterval for a
trickle below that).

Cycles: FERRYMQ_CRASH_CYCLES (default 20, ``make soak`` runs more); seed: FERRYMQ_CRASH_SEED.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time

import pytest
from store_checks import Acked, assert_acked_present, check_consume_queues_agree, offline_store, pull_queue, records_by_queue

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.store.checkpoint import read_checkpoint

pytestmark = pytest.mark.integration

TOPIC = "CrashTopic"
QUEUES = 4
SENDERS = 8
STORE_SETTINGS = [
    "mappedFileSizeCommitLog=131072",  # 128 KiB: kills land near file rolls too
    "mappedFileSizeConsumeQueue=2000",
    "maxHashSlotNum=512",
    "maxIndexNum=2048",
    "flushIntervalConsumeQueue=100",
    "flushConsumeQueueThoroughInterval=300",  # the checkpoint moves often: recovery starts late in the log
    # durability under kill -9 is under test, not admission control: a loaded machine (make test
    # runs modules in parallel) must not turn a send into SYSTEM_BUSY after 200 ms in the queue
    "waitTimeMillsInSendQueue=5000",
]
CYCLES = int(os.environ.get("FERRYMQ_CRASH_CYCLES", "20"))
SEED = int(os.environ.get("FERRYMQ_CRASH_SEED", str(random.randrange(1 << 30))))


async def produce_until_killed(proc, cycle: int, rng: random.Random, acked: list[Acked]) -> tuple[float, int]:
    """Concurrent senders until the broker is killed after a random number of acknowledgements.
    Returns (when it was killed, acknowledgements this cycle)."""
    kill_after = rng.randrange(20, 400)
    done_this_cycle = 0
    killed = asyncio.Event()
    kill_time = [0.0]

    async def sender(n: int) -> None:
        nonlocal done_this_cycle
        mq = MessageQueue(TOPIC, "broker-a", n % QUEUES)
        seq = 0
        while not killed.is_set():
            body = f"c{cycle}-s{n}-{seq}-".encode() + rng.randbytes(rng.randrange(10, 3000))
            seq += 1
            try:
                result = await producer.send(Message(TOPIC, body, properties={"KEYS": f"c{cycle}s{n}"}), queue=mq)
            except MQClientError:
                if killed.is_set():
                    return
                raise
            if result.status is SendStatus.SEND_OK:
                acked.append(Acked(mq.queue_id, result.queue_offset, body, result.offset_msg_id, time.monotonic()))
                done_this_cycle += 1
                if done_this_cycle == kill_after:
                    kill_time[0] = time.monotonic()
                    proc.kill()  # SIGKILL while the other senders' requests are in flight
                    killed.set()

    producer = Producer(f"crash-{cycle}", namesrv_addr=proc.namesrv_addr, send_timeout=5, retry_times=0)
    await producer.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(sender(n) for n in range(SENDERS))), 120)
    finally:
        await producer.close()
    return kill_time[0], done_this_cycle


async def verify_through_broker(proc, acked: list[Acked]) -> None:
    async with PullConsumer("crash-check", namesrv_addr=proc.namesrv_addr) as consumer:
        queues = {q: await pull_queue(consumer, MessageQueue(TOPIC, "broker-a", q)) for q in range(QUEUES)}
    assert_acked_present(queues, acked)


async def create_topic(proc) -> None:
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES, broker_addr=proc.broker_addr)


@pytest.mark.slow  # 30-40 s: the suite keeps tests of 25 s or more for make test-slow
async def test_sync_flush_survives_kill_9_under_load(standalone_process, tmp_path):
    rng = random.Random(SEED)
    settings = ["flushDiskType=SYNC_FLUSH", *STORE_SETTINGS]
    store_dir = tmp_path / "store"
    proc = await asyncio.to_thread(standalone_process, store_dir, settings)
    await create_topic(proc)
    acked: list[Acked] = []
    started = time.monotonic()
    for cycle in range(CYCLES):
        _, count = await produce_until_killed(proc, cycle, rng, acked)
        assert (store_dir / "abort").exists()
        # The CommitLog and ConsumeQueues as the broker will recover them.
        with offline_store(store_dir, tmp_path / "check", settings) as store:
            assert not store.last_exit_clean
            checked = check_consume_queues_agree(store)
            assert_acked_present(records_by_queue(store, TOPIC, QUEUES), acked)
        await asyncio.to_thread(proc.start)  # same ports, same directory: abnormal recovery
        await verify_through_broker(proc, acked)
        assert "was not shut down cleanly" in proc.log()
        print(f"cycle {cycle}: {count} acks, killed; {len(acked)} acknowledged in all, {checked} records "
              f"consistent after recovery")
    print(f"SYNC_FLUSH kill -9: {CYCLES} cycles, {len(acked)} acknowledged messages, none lost "
          f"(seed {SEED}, {time.monotonic() - started:.1f} s)")


async def test_async_flush_kill_9_and_a_simulated_power_cut(standalone_process, tmp_path):
    rng = random.Random(SEED + 1)
    settings = ["flushDiskType=ASYNC_FLUSH", *STORE_SETTINGS]  # flushIntervalCommitLog 500 ms, 4 pages, 10 s
    store_dir = tmp_path / "store"
    proc = await asyncio.to_thread(standalone_process, store_dir, settings)
    await create_topic(proc)
    acked: list[Acked] = []
    report = []
    for cycle in range(max(3, CYCLES // 4)):
        cycle_started = time.monotonic()
        kill_time, _ = await produce_until_killed(proc, cycle, rng, acked)
        flushed = read_checkpoint(store_dir / "checkpoint")["physicFlushedOffset"]
        # 1. A process crash loses nothing: the page cache has every acknowledged byte.
        with offline_store(store_dir, tmp_path / "check", settings) as store:
            check_consume_queues_agree(store)
            assert_acked_present(records_by_queue(store, TOPIC, QUEUES), acked)
            sizes = {a.phys: len(store.look_message_by_offset(a.phys)) for a in acked}
        # 2. A power cut at the same moment keeps at worst what the last fsync covered.
        cut = tmp_path / "power-cut"
        if cut.exists():
            shutil.rmtree(cut)
        shutil.copytree(store_dir, cut)
        cut_commit_log(cut, flushed)
        with offline_store(cut, tmp_path / "power-cut-check", settings) as store:
            check_consume_queues_agree(store)
            present = records_by_queue(store, TOPIC, QUEUES)
        kept = {(m.queue_id, m.queue_offset) for msgs in present.values() for m in msgs}
        lost = [a for a in acked if (a.queue_id, a.queue_offset) not in kept]
        assert all(a.phys + sizes[a.phys] > flushed for a in lost)  # only what the last fsync did not cover
        assert all(a.acked_at > cycle_started for a in lost)  # recovery fsynced what earlier crashes left
        assert_acked_present(present, [a for a in acked if a not in lost])
        ages = [kill_time - a.acked_at for a in lost]
        report.append((len(lost), sum(sizes[a.phys] for a in lost), max(ages, default=0.0)))
        print(f"cycle {cycle}: power cut at the kill would lose {len(lost)} acknowledged message(s) "
              f"({report[-1][1]} bytes), acknowledged at most {report[-1][2] * 1000:.0f} ms before it")
        await asyncio.to_thread(proc.start)
        await verify_through_broker(proc, acked)
    worst = max(r[2] for r in report)
    print(f"ASYNC_FLUSH: kill -9 lost nothing in {len(report)} cycles; a power cut at those moments would have lost "
          f"{[r[0] for r in report]} acknowledged messages, the oldest acknowledged {worst * 1000:.0f} ms before the cut "
          f"(flushIntervalCommitLog 500 ms; seed {SEED})")


def cut_commit_log(store_dir, offset: int) -> None:
    """Zero the CommitLog from ``offset`` on and drop later files, as if those bytes never reached the disk."""
    commit_log = store_dir / "commitlog"
    for path in sorted(commit_log.iterdir()):
        start = int(path.name)
        size = path.stat().st_size
        if start >= offset and start != 0:
            path.unlink()
        elif start + size > offset:
            with open(path, "r+b") as f:
                f.truncate(offset - start)
                f.truncate(size)
