"""Checks shared by the store's integration tests: read a broker's store directory offline
(on a copy, as the broker would recover it) and compare it with what was acknowledged."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ferrymq.broker.config import load_broker_settings
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import MessageExt, SysFlag, decode_record, decode_records
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import MessageQueue
from ferrymq.store import GetStatus, MessageStore


@dataclass
class Acked:
    """A send the broker acknowledged (SEND_OK): where it says the message is, and what it was."""

    queue_id: int
    queue_offset: int
    body: bytes
    offset_msg_id: str
    acked_at: float = 0.0  # time.monotonic() when the answer came

    @property
    def phys(self) -> int:
        return decode_offset_msg_id(self.offset_msg_id)[2]


@contextlib.contextmanager
def offline_store(store_dir: Path, copy_to: Path, settings: list[str]) -> Iterator[MessageStore]:
    """The store as a broker with ``settings`` would recover it, opened on a copy of ``store_dir``."""
    if copy_to.exists():
        shutil.rmtree(copy_to)
    shutil.copytree(store_dir, copy_to)
    _, config = load_broker_settings(None, settings)
    config.store_path_root_dir = str(copy_to)
    store = MessageStore(config, store_host=("127.0.0.1", 1))
    store.load()
    try:
        yield store
    finally:
        store.shutdown()


def check_consume_queues_agree(store: MessageStore) -> int:
    """Every dispatched CommitLog record has its ConsumeQueue entry (offset, size, tag hash) and
    every ConsumeQueue entry points at the record that names that queue and offset. Returns
    the number of records checked."""
    cl = store.commit_log
    seen: dict[tuple[str, int], list[int]] = {}
    count = 0
    for phys, record in cl.iter_records(cl.min_offset, cl.max_offset):
        m, _ = decode_record(record, check_crc=True)
        count += 1
        if not SysFlag.is_dispatched(m.sys_flag):
            continue
        assert m.commit_log_offset == phys
        entry = store.queues.get(m.topic, m.queue_id).entry(m.queue_offset)
        tags = m.properties.get("TAGS")
        assert entry == (phys, len(record), java_string_hash(tags) if tags else 0), (m.topic, m.queue_id, m.queue_offset)
        seen.setdefault((m.topic, m.queue_id), []).append(m.queue_offset)
    for (topic, queue_id), offsets in seen.items():
        lo, hi = store.get_min_offset_in_queue(topic, queue_id), store.get_max_offset_in_queue(topic, queue_id)
        assert offsets == list(range(lo, hi)), f"{topic}-{queue_id}: CommitLog offsets are not dense [{lo}, {hi})"
    for topic, queue_ids in store.topic_queue_ids().items():
        for queue_id in queue_ids:
            if store.get_max_offset_in_queue(topic, queue_id) > store.get_min_offset_in_queue(topic, queue_id):
                assert (topic, queue_id) in seen, f"{topic}-{queue_id}: entries without CommitLog records"
    return count


def records_by_queue(store: MessageStore, topic: str, queues: int) -> dict[int, list[MessageExt]]:
    out = {}
    for queue_id in range(queues):
        msgs, offset = [], store.get_min_offset_in_queue(topic, queue_id)
        while (r := store.get_messages("check", topic, queue_id, offset, 32)).status is GetStatus.FOUND:
            msgs += decode_records(r.body(), check_crc=True)
            offset = r.next_begin_offset
        out[queue_id] = msgs
    return out


async def pull_queue(consumer: PullConsumer, mq: MessageQueue) -> list[MessageExt]:
    """Everything in ``mq`` through the broker, from its min offset to its max."""
    offset, out = await consumer.min_offset(mq), []
    while True:
        result = await consumer.pull(mq, offset, max_nums=32)
        if result.status is not PullStatus.FOUND:
            assert result.status is PullStatus.NO_NEW_MSG, result.status
            return out
        out += result.messages
        offset = result.next_begin_offset


def assert_acked_present(queues: dict[int, list[MessageExt]], acked: list[Acked]) -> None:
    """Offsets dense from each queue's start, no duplicates, and every acknowledged message
    byte-identical at its acknowledged offset."""
    by_offset = {}
    for queue_id, msgs in queues.items():
        offsets = [m.queue_offset for m in msgs]
        if offsets:
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"queue {queue_id}: gaps or duplicates"
        by_offset.update({(queue_id, m.queue_offset): m for m in msgs})
    missing = [a for a in acked if (a.queue_id, a.queue_offset) not in by_offset]
    assert not missing, f"{len(missing)} acknowledged message(s) lost, first: {missing[0]}"
    for a in acked:
        m = by_offset[(a.queue_id, a.queue_offset)]
        assert m.body == a.body, f"queue {a.queue_id} offset {a.queue_offset}: body differs"
        assert m.commit_log_offset == a.phys, f"queue {a.queue_id} offset {a.queue_offset}: moved in the CommitLog"
