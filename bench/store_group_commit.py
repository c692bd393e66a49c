"""SYNC_FLUSH throughput with 1, 16 and 128 concurrent producers, and how many acknowledgements
each fsync carries (group commit).

Two levels:
* store: the broker's AsyncMessageStore in this process (writer thread, group-commit
  thread, acknowledgements as futures on the event loop), N coroutines each sending one
  message after another; no network.
* broker: a ``ferrymq standalone`` subprocess and N concurrent senders over TCP from this
  process (one Python Producer). The fsync count comes from the broker's shutdown log line.
ASYNC_FLUSH with the same load is shown for comparison.

Not a test. Run: .venv/bin/python bench/store_group_commit.py [--seconds 3] [--body 1024] [--dir PATH] [--skip-broker]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferrymq.store.asyncio_store import AsyncMessageStore  # noqa: E402
from ferrymq.client.admin import AdminClient  # noqa: E402
from ferrymq.client.producer import Producer, SendStatus  # noqa: E402
from ferrymq.common.message import Message, MessageExt  # noqa: E402
from ferrymq.common.protocol import MessageQueue  # noqa: E402
from ferrymq.store import ASYNC_FLUSH, SYNC_FLUSH, MessageStore, PutStatus, StoreConfig  # noqa: E402

PRODUCERS = (1, 16, 128)
QUEUES = 8


async def store_level(root: str, flush: str, producers: int, seconds: float, body: bytes) -> dict:
    store = AsyncMessageStore(MessageStore(StoreConfig(root, flush_disk_type=flush, max_hash_slot_num=500_000,
                                                       max_index_num=2_000_000), store_host=("10.0.0.1", 10911)))
    await store.load(("10.0.0.1", 10911))  # the store host stamped into records
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def producer(n: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            m = MessageExt("BenchTopic", body, properties={"KEYS": f"p{n}-{i}", "UNIQ_KEY": f"{n:08X}{i:024X}"},
                           queue_id=n % QUEUES, born_host=("10.0.0.2", 50000), born_timestamp=int(time.time() * 1000))
            started = time.perf_counter()
            result = await store.put_message(m)
            latencies.append(time.perf_counter() - started)
            if result.status is not PutStatus.PUT_OK:
                raise SystemExit(f"put failed: {result}")
            i += 1

    started = time.monotonic()
    await asyncio.gather(*(producer(n) for n in range(producers)))
    elapsed = time.monotonic() - started
    stats = store.group_commit_stats
    await store.shutdown()
    return _row(len(latencies), elapsed, latencies, stats.fsyncs if stats else None)


def _row(count: int, elapsed: float, latencies: list[float], fsyncs: int | None) -> dict:
    latencies.sort()
    return {"acks": count, "per_s": count / elapsed, "fsyncs": fsyncs,
            "per_fsync": count / fsyncs if fsyncs else None,
            "p50_ms": statistics.median(latencies) * 1000 if latencies else 0,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0}


async def broker_level(parent: Path, flush: str, producers: int, seconds: float, body: bytes) -> dict:
    from testkit.processes import StandaloneProcess

    proc = await asyncio.to_thread(StandaloneProcess(parent / f"broker-{flush}-{producers}", [
        f"flushDiskType={flush}", "maxHashSlotNum=500000", "maxIndexNum=2000000"]).start)
    try:
        async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
            await admin.create_topic("BenchTopic", read_queues=QUEUES, write_queues=QUEUES, broker_addr=proc.broker_addr)
        latencies: list[float] = []
        async with Producer("bench", namesrv_addr=proc.namesrv_addr, send_timeout=30) as producer:
            await producer.send(Message("BenchTopic", b"warm-up"))
            deadline = time.monotonic() + seconds

            async def sender(n: int) -> None:
                mq = MessageQueue("BenchTopic", "broker-a", n % QUEUES)
                i = 0
                while time.monotonic() < deadline:
                    started = time.perf_counter()
                    r = await producer.send(Message("BenchTopic", body, properties={"KEYS": f"p{n}-{i}"}), queue=mq)
                    latencies.append(time.perf_counter() - started)
                    if r.status is not SendStatus.SEND_OK:
                        raise SystemExit(f"send answered {r.status}")
                    i += 1

            started = time.monotonic()
            await asyncio.gather(*(sender(n) for n in range(producers)))
            elapsed = time.monotonic() - started
    finally:
        await asyncio.to_thread(proc.stop)
    fsyncs = None
    m = re.search(r"group commit: (\d+) acknowledgement\(s\) over (\d+) fsync", proc.log())
    if m:
        fsyncs = int(m.group(2)) * len(latencies) // max(1, int(m.group(1)))  # (the warm-up send is in the log too)
    return _row(len(latencies), elapsed, latencies, fsyncs)


def print_table(title: str, rows: list[tuple[str, int, dict]]) -> None:
    print(f"\n{title}")
    print(f"{'flush':<12} {'producers':>9} {'acks':>8} {'acks/s':>9} {'fsyncs':>7} {'acks/fsync':>10} {'p50 ms':>7} {'p99 ms':>7}")
    for flush, producers, r in rows:
        fsyncs = "-" if r["fsyncs"] is None else str(r["fsyncs"])
        per = "-" if r["per_fsync"] is None else f"{r['per_fsync']:.1f}"
        print(f"{flush:<12} {producers:>9} {r['acks']:>8} {r['per_s']:>9,.0f} {fsyncs:>7} {per:>10} "
              f"{r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="load per row (default 3)")
    parser.add_argument("--body", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--dir", default=None, help="parent directory for the stores (default: a temp dir)")
    parser.add_argument("--skip-broker", action="store_true", help="only the store-level rows")
    args = parser.parse_args()
    body = b"x" * args.body
    with tempfile.TemporaryDirectory(dir=args.dir) as parent:
        rows = []
        for flush, counts in ((SYNC_FLUSH, PRODUCERS), (ASYNC_FLUSH, (128,))):
            for n in counts:
                rows.append((flush, n, await store_level(f"{parent}/store-{flush}-{n}", flush, n, args.seconds, body)))
        print_table(f"store level (AsyncMessageStore, {args.body} B bodies, {args.seconds:.0f} s per row)", rows)
        if not args.skip_broker:
            rows = []
            for flush, counts in ((SYNC_FLUSH, PRODUCERS), (ASYNC_FLUSH, (128,))):
                for n in counts:
                    rows.append((flush, n, await broker_level(Path(parent), flush, n, args.seconds, body)))
            print_table(f"broker level (ferrymq standalone subprocess, Python producer over TCP, {args.body} B bodies)", rows)


if __name__ == "__main__":
    asyncio.run(main())
