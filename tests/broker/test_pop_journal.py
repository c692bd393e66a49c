"""The POP journal on real files: what a crash leaves (a torn last line) and compaction, alone
and under a broker that keeps receiving and acking."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.broker.pop import AckStatus
from ferrymq.broker.pop.journal import PopJournal, encode
from tests.consumer_support import create_topic, produce
from tests.support import InProcessCluster


async def test_replay_stops_at_a_torn_last_line(tmp_path):
    journal = PopJournal(tmp_path)
    assert await journal.load() == []
    await journal.open([])
    for i in range(5):
        await journal.append({"k": "A", "g": "g", "t": "t", "q": 0, "o": i})
    await journal.close()
    whole = encode({"k": "A", "g": "g", "t": "t", "q": 0, "o": 5})
    with open(journal.path, "ab") as f:
        f.write(whole[: len(whole) // 2])  # the crash cut the last write short
    records = await PopJournal(tmp_path).load()
    assert [r["o"] for r in records] == [0, 1, 2, 3, 4]


async def test_replay_stops_at_a_corrupt_line(tmp_path):
    journal = PopJournal(tmp_path)
    await journal.open([])
    for i in range(3):
        await journal.append({"k": "A", "g": "g", "t": "t", "q": 0, "o": i})
    await journal.close()
    data = journal.path.read_bytes().replace(b'"o":1', b'"o":7')  # a flipped byte: checksum mismatch
    journal.path.write_bytes(data)
    assert [r["o"] for r in await PopJournal(tmp_path).load()] == [0]


async def test_open_compacts_to_the_snapshot_given(tmp_path):
    journal = PopJournal(tmp_path)
    await journal.open([])
    for i in range(50):
        await journal.append({"k": "A", "g": "g", "t": "t", "q": 0, "o": i})
    await journal.close()
    again = PopJournal(tmp_path)
    assert len(await again.load()) == 50
    await again.open([{"k": "P", "g": "g", "t": "t", "q": 0, "n": 50, "m": []}])
    await again.close()
    assert await PopJournal(tmp_path).load() == [{"k": "P", "g": "g", "t": "t", "q": 0, "n": 50, "m": []}]


@pytest.mark.integration
async def test_broker_compacts_its_journal_and_restarts_from_it(tmp_path):
    cluster = InProcessCluster(tmp_path / "store")
    await cluster.start()
    try:
        ns = cluster.namesrv_addr
        await create_topic(ns, "PopCompact", 2)
        await produce(ns, "PopCompact", 300)
        pop = cluster.broker.pop
        pop.journal.compact_bytes = 4096
        kept = []
        while True:
            r = await pop.receive(group="cg", topic="PopCompact", max_messages=8, invisible_ms=2000, poll_ms=0)
            if not r.messages:
                break
            for i, p in enumerate(r.messages):
                if i == 0 and len(kept) < 10:
                    kept.append(p.message.keys[0])  # left unacked
                else:
                    assert await pop.ack(group="cg", topic="PopCompact", receipt_handle=p.receipt_handle) is AckStatus.OK
        assert pop.journal.compactions > 0
        assert pop.journal.path.stat().st_size < 3 * 4096, "compacted, not one line per receive and ack"
        await cluster.restart_broker()
        pop = cluster.broker.pop
        back = []
        for _ in range(20):
            r = await pop.receive(group="cg", topic="PopCompact", max_messages=32, invisible_ms=60_000, poll_ms=3000)
            back += [p.message.keys[0] for p in r.messages]
            if len(back) >= len(kept):
                break
        assert sorted(back) == sorted(kept)
        r = await pop.receive(group="cg", topic="PopCompact", max_messages=32, invisible_ms=60_000, poll_ms=500)
        assert r.messages == []
    finally:
        await cluster.stop()


@pytest.mark.integration
async def test_a_record_the_broker_cannot_apply_does_not_stop_it(tmp_path):
    pop_dir = tmp_path / "store" / "pop"
    pop_dir.mkdir(parents=True)
    (pop_dir / "journal").write_bytes(encode({"k": "P", "g": "g"}) + encode({"k": "X", "g": "g", "t": "t", "q": 0}))
    cluster = InProcessCluster(tmp_path / "store")
    await cluster.start()
    try:
        assert cluster.broker.pop.lag("g", "t") == {}
        assert await PopJournal(pop_dir).load() == [], "compacted to the (empty) state at load"
    finally:
        await cluster.stop()
