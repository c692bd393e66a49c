"""Store throughput: put (ASYNC_FLUSH), put (SYNC_FLUSH) and pull, printing msgs/s.

Not a test. Run: .venv/bin/python bench/store_bench.py [--messages N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from ferrymq.common.message import MessageExt
from ferrymq.store import ASYNC_FLUSH, SYNC_FLUSH, GetStatus, MessageStore, PutStatus, StoreConfig

TOPIC = "BenchTopic"
QUEUES = 8


def _message(i: int, body: bytes) -> MessageExt:
    return MessageExt(
        TOPIC, body, properties={"TAGS": "TagA", "KEYS": f"k{i}"}, queue_id=i % QUEUES,
        born_timestamp=int(time.time() * 1000), born_host=("192.168.0.10", 50000),
    )  # fmt: skip


def _open(root: str, flush: str) -> MessageStore:
    store = MessageStore(StoreConfig(root, flush_disk_type=flush), store_host=("192.168.0.1", 10911))
    store.load()
    return store


def bench_put(root: str, flush: str, count: int, body: bytes) -> float:
    store = _open(root, flush)
    msgs = [_message(i, body) for i in range(count)]
    started = time.perf_counter()
    for m in msgs:
        if store.put_message(m).status is not PutStatus.PUT_OK:
            raise SystemExit("put failed")
    elapsed = time.perf_counter() - started
    store.shutdown()
    return count / elapsed


def bench_get(root: str, count: int) -> tuple[float, float]:
    """Returns (seconds to load the store (a clean restart), msgs/s pulled)."""
    started = time.perf_counter()
    store = _open(root, ASYNC_FLUSH)
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    got = 0
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            result = store.get_messages("bench", TOPIC, queue_id, offset, 32)
            if result.status is not GetStatus.FOUND:
                break
            got += len(result.records)
            offset = result.next_begin_offset
    elapsed = time.perf_counter() - started
    store.shutdown()
    if got < count:
        raise SystemExit(f"read back {got} of {count}")
    return load_seconds, got / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sync-messages", type=int, default=2_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="store directory parent (default: a temp dir)")
    args = parser.parse_args()
    body = b"x" * args.body
    with tempfile.TemporaryDirectory(dir=args.dir) as async_root, tempfile.TemporaryDirectory(dir=args.dir) as sync_root:
        put_async = bench_put(async_root, ASYNC_FLUSH, args.messages, body)
        load_seconds, get = bench_get(async_root, args.messages)
        put_sync = bench_put(sync_root, SYNC_FLUSH, args.sync_messages, body)
    print(f"put  ASYNC_FLUSH  {args.messages:>7} x {args.body} B: {put_async:>10,.0f} msgs/s")
    print(f"put  SYNC_FLUSH   {args.sync_messages:>7} x {args.body} B: {put_sync:>10,.0f} msgs/s (one thread: an fsync per put)")
    print(f"get  32 per pull  {args.messages:>7} x {args.body} B: {get:>10,.0f} msgs/s")
    print(f"load (clean restart): {load_seconds * 1000:.0f} ms")


if __name__ == "__main__":
    main()
