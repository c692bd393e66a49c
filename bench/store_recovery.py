"""Recovery time of a 1 GiB CommitLog after an abnormal shutdown (kill -9), and after a clean one.

A child process fills one 1 GiB CommitLog segment (1 KiB bodies, a UNIQ_KEY and a KEYS value
each, 8 queues, ASYNC_FLUSH with the broker's timers' calls made by hand) and then kills
itself with SIGKILL: the ``abort`` file stays. Then a fresh process opens the store and the
time of ``load()`` is measured (abnormal recovery: every record of the segment validated
with its CRC; records newer than the checkpoint dispatched again to the ConsumeQueues and
IndexFile). Variants: ConsumeQueues deleted (rebuilt from the CommitLog), a clean restart,
and, with ``--checkpoint fresh``, a kill right after the thorough ConsumeQueue flush that
moves the checkpoint (default ``stale``: the checkpoint is as old as the broker's 60 s
flushConsumeQueueThoroughInterval lets it get during the fill).

Not a test. Run: .venv/bin/python bench/store_recovery.py [--size-mib 1024] [--dir PATH] [--drop-caches]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferrymq.common.message import MessageExt  # noqa: E402
from ferrymq.store import MessageStore, StoreConfig  # noqa: E402

QUEUES = 8
BODY = 1024


def config(root: str, size: int) -> StoreConfig:
    return StoreConfig(root, mapped_file_size_commit_log=size)


def fill_and_die(root: str, size: int, fresh_checkpoint: bool) -> None:
    """Child: fill the first segment almost to the end, flush on the broker's schedule, SIGKILL self."""
    store = MessageStore(config(root, size), store_host=("10.0.0.1", 10911))
    store.load()
    body = os.urandom(BODY)
    i, started, last_flush = 0, time.monotonic(), time.monotonic()
    while store.max_phy_offset < size - 4 * BODY:
        m = MessageExt("BenchTopic", body, properties={"TAGS": "TagA", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:030d}"},
                       queue_id=i % QUEUES, born_timestamp=int(time.time() * 1000), born_host=("10.0.0.2", 50000))
        store.put_message(m)
        i += 1
        if time.monotonic() - last_flush > 0.5:  # what the broker's timers do
            store.flush_commit_log_timed()
            store.flush_consume_queues_timed()
            last_flush = time.monotonic()
    if fresh_checkpoint:
        store.flush_commit_log()
        store.flush_consume_queues()  # the thorough flush: checkpoint times = the newest record
    print(json.dumps({"messages": i, "bytes": store.max_phy_offset, "fill_seconds": time.monotonic() - started}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def timed_load(root: str, size: int) -> tuple[float, MessageStore]:
    store = MessageStore(config(root, size), store_host=("10.0.0.1", 10911))
    started = time.perf_counter()
    store.load()
    return time.perf_counter() - started, store


def check(store: MessageStore, filled: dict) -> None:
    """Every message is where it was put: the CommitLog end and every queue's range."""
    assert store.max_phy_offset == filled["bytes"], (store.max_phy_offset, filled["bytes"])
    for queue_id in range(QUEUES):
        expected = (filled["messages"] - queue_id + QUEUES - 1) // QUEUES
        assert store.get_min_offset_in_queue("BenchTopic", queue_id) == 0
        assert store.get_max_offset_in_queue("BenchTopic", queue_id) == expected, (queue_id, expected)
    last = filled["messages"] - 1
    assert len(store.query_message("BenchTopic", f"U{last:030d}", 32, 0, 2**62).records) == 1


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="CommitLog size (one segment), default 1024")
    parser.add_argument("--dir", default=None, help="parent directory for the store (default: a temp dir)")
    parser.add_argument("--drop-caches", action="store_true", help="also measure with a cold page cache (root)")
    parser.add_argument("--checkpoint", choices=["stale", "fresh"], default="stale",
                        help="kill as the timers left the checkpoint (stale) or right after it moved (fresh)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size_mib * 1024 * 1024
    if args.child:
        fill_and_die(args.child, size, args.checkpoint == "fresh")
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as parent:
        root = os.path.join(parent, "store")
        child = subprocess.run([sys.executable, __file__, "--size-mib", str(args.size_mib), "--checkpoint",
                                args.checkpoint, "--child", root], capture_output=True, text=True)
        assert child.returncode == -signal.SIGKILL, child.stderr
        filled = json.loads(child.stdout)
        backup = os.path.join(parent, "crashed")
        shutil.copytree(root, backup)
        print(f"filled {filled['bytes'] / 2**20:.0f} MiB ({filled['messages']} messages of {BODY} B, 2 index keys each) "
              f"in {filled['fill_seconds']:.1f} s, then SIGKILL; checkpoint {args.checkpoint}")

        rows = []

        def measure(name: str) -> None:
            seconds, store = timed_load(root, size)
            rows.append((name, seconds, store.last_recovery.records_checked))
            check(store, filled)
            store.shutdown()

        def fresh_copy() -> None:
            shutil.rmtree(root)
            shutil.copytree(backup, root)

        measure("abnormal (kill -9), warm page cache")
        measure("clean restart")
        fresh_copy()
        shutil.rmtree(os.path.join(root, "consumequeue"))
        measure("abnormal, ConsumeQueues lost (rebuilt)")
        if args.drop_caches:
            fresh_copy()
            drop_caches()
            measure("abnormal (kill -9), cold page cache")

    print(f"{'recovery of a ' + str(args.size_mib) + ' MiB CommitLog':<45} {'seconds':>8} {'records checked':>16} {'MiB/s':>8}")
    for name, seconds, checked in rows:
        print(f"{name:<45} {seconds:>8.2f} {checked:>16} {filled['bytes'] / 2**20 / seconds:>8.0f}")


if __name__ == "__main__":
    main()
