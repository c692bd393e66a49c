"""A killed broker whose CommitLog was damaged (a flipped byte in a body, a file cut mid-record)
comes back by itself: the bad record is found on recovery, the log says where, the CommitLog
is cut there, and every message before it is served; new sends take the freed offsets."""

from __future__ import annotations

import asyncio
import os

import pytest
from store_checks import Acked, assert_acked_present, pull_queue

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue

pytestmark = pytest.mark.integration

SEGMENT = 65536
SETTINGS = ["flushDiskType=SYNC_FLUSH", f"mappedFileSizeCommitLog={SEGMENT}", "maxHashSlotNum=64", "maxIndexNum=1000"]


async def produce(proc, count: int) -> list[Acked]:
    acked = []
    async with Producer("p", namesrv_addr=proc.namesrv_addr) as producer:
        for i in range(count):
            mq = MessageQueue("Damaged", "broker-a", i % 2)
            body = b"%05d" % i + b"." * 700
            r = await producer.send(Message("Damaged", body), queue=mq)
            acked.append(Acked(mq.queue_id, r.queue_offset, body, r.offset_msg_id))
    return acked


async def served(proc) -> dict:
    async with PullConsumer("g", namesrv_addr=proc.namesrv_addr) as consumer:
        return {q: await pull_queue(consumer, MessageQueue("Damaged", "broker-a", q)) for q in (0, 1)}


@pytest.mark.parametrize("damage", ["flipped body byte", "file cut mid-record"])
async def test_broker_recovers_from_a_damaged_commit_log(standalone_process, tmp_path, damage):
    proc = await asyncio.to_thread(standalone_process, tmp_path / "store", SETTINGS)
    acked = await produce(proc, 200)  # about 3 CommitLog files
    proc.kill()
    victim = acked[170]
    path = tmp_path / "store" / "commitlog" / f"{victim.phys - victim.phys % SEGMENT:020d}"
    if damage == "flipped body byte":
        with open(path, "r+b") as f:
            f.seek(victim.phys % SEGMENT + 400)  # inside the body
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 1]))
    else:
        os.truncate(path, victim.phys % SEGMENT + 123)

    await asyncio.to_thread(proc.start)
    log = proc.log()
    assert f"invalid data at offset {victim.phys}" in log
    assert f"truncating the CommitLog at {victim.phys}" in log
    kept = [a for a in acked if a.phys < victim.phys]
    queues = await served(proc)
    assert_acked_present(queues, kept)
    assert sum(len(q) for q in queues.values()) == len(kept)  # nothing at or after the damage

    more = await produce(proc, 4)
    assert more[0].phys == victim.phys  # the broker writes on from the cut
    assert_acked_present(await served(proc), kept + more)


async def test_a_second_broker_on_the_same_store_stops_with_one_clear_line(standalone_process, tmp_path):
    first = await asyncio.to_thread(standalone_process, tmp_path / "store", SETTINGS)
    with pytest.raises(RuntimeError) as failed:
        await asyncio.to_thread(standalone_process, tmp_path / "store", SETTINGS)  # other ports, same directory
    output = str(failed.value)
    assert "exited with 1" in output
    assert f"error: Lock failed,MQ already started ({tmp_path / 'store' / 'lock'})" in output
    assert "Traceback" not in output
    assert (await produce(first, 1))[0].queue_offset == 0  # the first one is unharmed
