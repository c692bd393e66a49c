"""Queue locks for orderly consumers (LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42).

An orderly consumer may consume a queue only while it holds that queue's lock on the
broker, so two members of a group never consume the same queue at once, even while a
rebalance moves it. A lock is a lease: its holder renews it (every 20 s) and it lapses
after ``rebalanceLockMaxLiveTime`` (60 s) without renewal, so a dead client's queues are
freed. Like RocketMQ, a closed connection does not free its locks at once: a client that
lost its connection may still be in the middle of consuming.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ferrymq.common.protocol import MessageQueue

log = logging.getLogger(__name__)


@dataclass
class LockEntry:
    client_id: str
    last_update: float = field(default_factory=time.monotonic)


class QueueLockManager:
    def __init__(self, max_live_seconds: float = 60.0) -> None:
        self.max_live_seconds = max_live_seconds
        self._groups: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.max_live_seconds

    def try_lock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) what is free, expired or already ours; returns what ``client_id`` now holds."""
        now = time.monotonic()
        table = self._groups.setdefault(group, {})
        locked: set[MessageQueue] = set()
        for mq in mqs:
            entry = table.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                if entry is not None and entry.client_id != client_id:
                    log.info("lock of %s in group %s expired for %s; now held by %s", mq, group, entry.client_id, client_id)
                table[mq] = LockEntry(client_id, now)
                locked.add(mq)
            else:
                log.debug("%s of group %s is locked by %s, not %s", mq, group, entry.client_id, client_id)
        return locked

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        table = self._groups.get(group)
        if not table:
            return
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]
        if not table:
            del self._groups[group]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        entry = self._groups.get(group, {}).get(mq)
        if entry is None or self._expired(entry, time.monotonic()):
            return None
        return entry.client_id
