"""POP consumption: the broker-side semantics behind RocketMQ 5's ReceiveMessage / AckMessage /
ChangeInvisibleDuration (and the remoting POP_MESSAGE / ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME).

A receive hands out messages of a group's queues without the client owning the queues: each
message becomes invisible for ``invisible_ms`` and carries a receipt handle. An ack ends it
for good; a change of invisible time moves its deadline and issues a new handle (the old one
then answers EXPIRED). A message not acked by its deadline is delivered again with its
attempt count (and the message's reconsume times) raised; once a delivery numbered
``retryMaxTimes + 1`` (the group's, 16 by default, as classic retries) expires, the message
goes to ``%DLQ%<group>`` through the broker's one send-back path (broker/retry.py).

FIFO groups (``consumeMessageOrderly``, or a receive asking for it): a queue gives nothing new
while one of its messages is out with a consumer; when that message's invisible time ends it
is the one delivered again, so a queue's messages are consumed in order.

State per (group, topic, queue) lives in memory (pop/state.py) and every change is written to
an append-only journal (pop/journal.py) that rebuilds it after a restart or a crash: acks are
fsynced before they are answered, so no acked message comes again and every unacked one does.
The group's consume offset (its first unacknowledged message) goes to the broker's consumer
offset table, so ``admin group progress`` and /metrics show POP groups' lag.

A group and topic consumed by POP is not pulled by classic consumers at the same time: a POP
receive is refused while classic (PULL/PUSH) consumers of the group are online for the topic,
and a classic pull is refused while the group POP-consumes it (see ``classic_pull_refusal``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.long_polling import Waiters
from ferrymq.broker.message_filter import MessageFilter
from ferrymq.broker.pop import receipt
from ferrymq.broker.pop.admission import MAX_INVISIBLE_MS, check_receive
from ferrymq.broker.pop.journal import PopJournal, Record
from ferrymq.broker.pop.outcomes import AckStatus, InitMode, PopCounters, PoppedMessage, PopResult, PopStatus
from ferrymq.broker.pop.receivers import POP_ACTIVE_SECONDS, ReceiverAgent, Receivers
from ferrymq.broker.pop.revival import RevivalSchedule
from ferrymq.broker.pop.state import InFlight, QueueKey, QueueState
from ferrymq.broker.retry import RetryService, SendBackRequest
from ferrymq.common.message import MessageExt, decode_record
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.results import GetStatus

log = logging.getLogger(__name__)

__all__ = ["PopService"]

DLQ_RETRY_MS = 5000  # a failed move to the DLQ is tried again this much later


def now_ms() -> int:
    return int(time.time() * 1000)


class PopService:
    def __init__(self, ctx: BrokerContext, retry: RetryService, directory: Path, *,
                 max_polling: int = 10_000, read_refusal: Callable[[], str | None] = lambda: None) -> None:
        """``read_refusal()``: why the broker serves no reads now (None: it does)."""
        self.ctx = ctx
        self._read_refusal = read_refusal
        self.retry = retry
        self.journal = PopJournal(directory)
        self.journal.snapshot = self._snapshot
        self.max_polling = max_polling
        self.counters = PopCounters()
        self._queues: dict[QueueKey, QueueState] = {}
        self._by_group_topic: dict[tuple[str, str], list[QueueState]] = defaultdict(list)  # the same states, indexed
        self._seq = 0
        self._revival = RevivalSchedule(self._in_flight)
        self._revive_changed = asyncio.Event()
        self._waiters: Waiters[str] = Waiters()  # held receives, per topic
        self.waiting = 0  # receives held by long polling now
        self._rr: dict[tuple[str, str], int] = defaultdict(int)
        self.receivers = Receivers()
        self._loaded = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def load(self) -> None:
        """Rebuild every queue's state from the journal (after the store has loaded), and
        start a compacted journal."""
        records = await self.journal.load()
        for record in records:
            try:
                self._apply(record)
            except (KeyError, TypeError, ValueError) as exc:  # a record this version does not know
                log.warning("pop journal: skipping a record it cannot apply (%r): %s", exc, record)
        for key, st in list(self._queues.items()):
            _, topic, queue_id = key
            max_offset = self.ctx.store.max_offset(topic, queue_id)
            # a store that lost its tail (power cut under ASYNC_FLUSH) cannot redeliver what it lost
            st.next_offset = min(st.next_offset, max_offset)
            for offset in [o for o in st.inflight if o >= max_offset]:
                del st.inflight[offset]
            for e in st.inflight.values():
                self._revival.add(key, e)
            self._commit_offset(key, st)
        # Handles issued before a crash whose records never reached the disk must not match a
        # delivery made now: seqs continue from the clock (microseconds), above any issued before.
        self._seq = max(self._seq, time.time_ns() // 1000)
        await self.journal.open(self._snapshot())
        self._loaded = True
        inflight = sum(len(s.inflight) for s in self._queues.values())
        if self._queues:
            log.info("pop state loaded: %d queues, %d messages in flight, %d journal records replayed",
                     len(self._queues), inflight, len(records))

    def adopt_synced_offsets(self) -> None:
        """Becoming master (at start, or a slave promoted by failover): a queue whose consume
        offset in the consumer offset table, which the previous master synced here, is past this
        broker's own POP state for it was consumed elsewhere meanwhile; its state restarts from
        there (messages in flight below it are dropped, those above kept)."""
        for key, st in self._queues.items():
            synced = self.ctx.offsets.query(*key)
            if synced <= st.consume_offset:
                continue
            log.info("pop: %s/%d of group %s was consumed to %d elsewhere (here %d): continuing from there",
                     key[1], key[2], key[0], synced, st.consume_offset)
            st.inflight = {o: e for o, e in st.inflight.items() if o >= synced}
            st.next_offset = max(st.next_offset, synced)
            self._journal_quietly(_pop_record(key, st.next_offset, st.inflight.values(), kind="R"))
            self._commit_offset(key, st)

    def start(self) -> None:
        self.ctx.spawn(self._revive_loop(), "pop-revive")

    def release_held(self) -> None:
        """Shutdown, first step: answer held receives now and hold none from here on."""
        self._closed = True
        self._waiters.close()

    async def close(self) -> None:
        """Shutdown, once no request runs any more: write what the journal has queued, and stop."""
        self.release_held()
        self._revive_changed.set()
        if self._loaded:
            self._loaded = False
            await self.journal.close()

    def _apply(self, record: Record) -> None:
        key = (record["g"], record["t"], int(record["q"]))
        kind = record["k"]
        if kind == "P":
            st = self._queues.get(key)
            if st is None:
                st = self._add_state(key, QueueState(int(record["n"])))
            st.next_offset = int(record["n"])
            for values in record.get("m", ()):
                e = InFlight.from_list(values)
                st.inflight[e.offset] = e
                self._seq = max(self._seq, e.seq)
        elif kind == "R":  # the queue's whole state (adopt_synced_offsets)
            st = self._queues.get(key) or self._add_state(key, QueueState(int(record["n"])))
            st.next_offset = int(record["n"])
            st.inflight = {e.offset: e for e in map(InFlight.from_list, record.get("m", ()))}
        elif kind == "A":
            st = self._queues.get(key)
            if st is not None:
                st.inflight.pop(int(record["o"]), None)
        elif kind == "C":
            st = self._queues.get(key)
            e = st.inflight.get(int(record["o"])) if st is not None else None
            if e is not None:
                e.seq, e.deadline_ms = int(record["s"]), int(record["d"])
            self._seq = max(self._seq, int(record["s"]))

    def _snapshot(self) -> list[Record]:
        return [_pop_record(key, st.next_offset, st.inflight.values()) for key, st in self._queues.items()]

    # ------------------------------------------------------------------ receive

    async def receive(self, *, group: str, topic: str, queue_id: int = -1, max_messages: int, invisible_ms: int,
                      poll_ms: int, message_filter: MessageFilter | None = None, fifo: bool = False,
                      client_id: str = "", init_mode: InitMode = InitMode.MIN,
                      agent: ReceiverAgent | None = None) -> PopResult:
        """Up to ``max_messages`` messages of ``topic`` for ``group`` (from ``queue_id``, or from
        every readable queue in turn when -1), invisible for ``invisible_ms``; when there are
        none, wait up to ``poll_ms`` for some (an arrival, a redelivery due, a FIFO queue freed).
        ``client_id`` and ``agent`` (what a remoting request says of its client) are kept for the
        admin views of who is online (``clients``, ``client_agent``)."""
        if not self._loaded or self._closed:
            return PopResult(PopStatus.REFUSED, [], "the broker's POP service is not running",
                             ResponseCode.SERVICE_NOT_AVAILABLE)
        if (refusal := self._read_refusal()) is not None:
            return PopResult(PopStatus.REFUSED, [], refusal, ResponseCode.NO_PERMISSION)
        checked = check_receive(self.ctx, group, topic, queue_id, max_messages, invisible_ms, poll_ms)
        if isinstance(checked, PopResult):
            return checked
        group_config, read_queue_nums = checked
        fifo = fifo or bool(getattr(group_config, "consume_message_orderly", False))
        queue_ids = [queue_id] if queue_id >= 0 else list(range(read_queue_nums))
        wants = None if message_filter is None or message_filter.passes_all else message_filter.wants
        self.counters.receives += 1
        self.receivers.seen(group, topic, client_id, agent)
        deadline = time.monotonic() + poll_ms / 1000
        with self.receivers.receiving(group, topic):
            while True:
                # registered before reading, so an arrival during the read is not missed
                waiter = self._waiters.add(topic, wants)
                try:
                    found = await self._collect(group, topic, queue_ids, max_messages, invisible_ms, message_filter,
                                                fifo, group_config.retry_max_times + 1, init_mode)
                    if found:
                        return PopResult(PopStatus.FOUND, found)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._closed:
                        return PopResult(PopStatus.NO_NEW_MSG, [])
                    if self.waiting >= self.max_polling:
                        return PopResult(PopStatus.POLLING_FULL, [],
                                         f"{self.waiting} receives are already held by long polling")
                    self.waiting += 1
                    try:
                        await self._waiters.wait(waiter, remaining)
                    finally:
                        self.waiting -= 1
                finally:
                    self._waiters.remove(topic, waiter)

    async def _collect(self, group: str, topic: str, queue_ids: list[int], n: int, invisible_ms: int,
                       message_filter: MessageFilter | None, fifo: bool, max_attempts: int,
                       init_mode: InitMode) -> list[PoppedMessage]:
        out: list[PoppedMessage] = []
        start = self._rr[(group, topic)]
        self._rr[(group, topic)] = start + 1
        for i in range(len(queue_ids)):
            if len(out) >= n:
                break
            queue_id = queue_ids[(start + i) % len(queue_ids)]
            key = (group, topic, queue_id)
            st = self._queues.get(key) or await self._new_state(key, init_mode)
            if st.lock.locked():
                continue  # another receive is reading this queue
            if st.next_offset >= self.ctx.store.max_offset(topic, queue_id) and not st.inflight:
                continue  # nothing to read nor to redeliver: no trip to the store's threads
            async with st.lock:
                out += await self._collect_queue(key, st, n - len(out), invisible_ms, message_filter, fifo,
                                                 max_attempts)
        if len(out) >= n:
            self._wake(topic)  # a full batch may have left more: let other held receives look
        return out

    async def _new_state(self, key: QueueKey, init_mode: InitMode) -> QueueState:
        """The state of a queue the group never POP-consumed: from its committed offset if it
        has one (a group that consumed classically before), else per ``init_mode``. MAX is
        RocketMQ's: the queue's end, except that a queue whose first message is still stored and
        near the CommitLog's head (in memory) is read from its start."""
        group, topic, queue_id = key
        committed = self.ctx.offsets.query(group, topic, queue_id)
        store = self.ctx.store
        if committed >= 0:
            start = committed
        elif init_mode is InitMode.MAX:
            start = store.max_offset(topic, queue_id)
            if start > 0 and store.min_offset(topic, queue_id) == 0:
                first = await store.commit_log_offset(topic, queue_id, 0)
                if first >= 0 and store.is_in_memory(first):
                    start = 0
        else:
            start = store.min_offset(topic, queue_id)
        return self._queues.get(key) or self._add_state(key, QueueState(start))  # another receive may have made it

    def _add_state(self, key: QueueKey, st: QueueState) -> QueueState:
        self._queues[key] = st
        self._by_group_topic[(key[0], key[1])].append(st)
        return st

    async def _collect_queue(self, key: QueueKey, st: QueueState, n: int, invisible_ms: int,
                             message_filter: MessageFilter | None, fifo: bool,
                             max_attempts: int) -> list[PoppedMessage]:
        group, topic, queue_id = key
        now = now_ms()
        if fifo and st.blocked(now):
            return []
        picked: list[tuple[InFlight | None, MessageExt]] = []  # (the entry redelivered or None, message)
        due = st.visible_again(now)
        for e in due:
            if len(picked) >= n:
                break
            if e.attempt >= max_attempts:
                await self._dead_letter(key, st, e)
                continue
            record = await self.ctx.store.look_message(e.commit_log_offset)
            if record is None:  # deleted by retention meanwhile: nothing left to deliver
                log.warning("pop: message %s/%d@%d of group %s is no longer stored; dropping it", topic, queue_id,
                            e.offset, group)
                self._finish(key, st, e.offset)
                continue
            picked.append((e, decode_record(record)[0]))
        still_out = len(st.inflight) - len(picked)
        new_next = st.next_offset
        room = n - len(picked)
        if room > 0 and not (fifo and still_out > 0):
            tags = message_filter.tags if message_filter is not None else None
            record_filter = message_filter.record() if message_filter is not None else None
            result = await self.ctx.store.get_messages(group, topic, queue_id, st.next_offset, room, tags,
                                                       record_filter)
            if result.status not in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE,
                                     GetStatus.OFFSET_OVERFLOW_ONE):
                new_next = result.next_begin_offset  # past what filters left out or retention removed
            for raw in result.records:
                picked.append((None, decode_record(raw)[0]))
            if result.records:
                self.ctx.stats.record_get(topic, len(result.records), sum(map(len, result.records)))
        if not picked and new_next == st.next_offset:
            return []

        # Claim: what changed while we read (an ack, a change of invisible time) wins.
        now = now_ms()
        deadline = now + invisible_ms
        claimed: list[InFlight] = []
        out: list[PoppedMessage] = []
        for entry, msg in picked:
            if entry is not None:
                current = st.inflight.get(entry.offset)
                if current is not entry or current.deadline_ms > now:
                    continue
                attempt = entry.attempt + 1
                self.counters.redelivered += 1
            else:
                if msg.queue_offset < st.next_offset:
                    continue
                attempt = 1
                self.counters.received += 1
            self._seq += 1
            e = InFlight(msg.queue_offset, msg.commit_log_offset, attempt, self._seq, deadline)
            st.inflight[e.offset] = e
            claimed.append(e)
            self._revival.add(key, e)
            msg.reconsume_times = attempt - 1
            handle = receipt.Receipt(queue_id, e.offset, e.commit_log_offset, attempt, e.seq, deadline,
                                     self.ctx.config.broker_name).encode(group, topic)
            out.append(PoppedMessage(msg, handle, attempt, deadline))
        st.next_offset = new_next
        self.counters.by_topic[(group, topic)][0] += len(out)
        if self.ctx.tracing.enabled:
            self.ctx.tracing.delivered(((p.message, p.delivery_attempt) for p in out), group=group, via="pop")
        self._journal_quietly(_pop_record(key, st.next_offset, claimed))
        self._commit_offset(key, st)
        if claimed:
            self._revive_changed.set()
        return out

    def _journal_quietly(self, record: Record) -> None:
        """A receive's record: written with the next batch, not waited for (see journal.py)."""
        fut = self.journal.append(record)
        fut.add_done_callback(_log_failure)

    # ------------------------------------------------------------------ ack / change invisible

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> AckStatus:
        """End a received message for good. OK again for a handle of a message already acked."""
        found = self._lookup(group, topic, receipt_handle)
        if isinstance(found, AckStatus):
            if found is AckStatus.OK:
                return found
            self.counters.refused_handles += 1
            return found
        key, st, e = found
        self._finish(key, st, e.offset)
        self.counters.acked += 1
        if self.ctx.tracing.enabled:
            self.ctx.tracing.acked(group=group, topic=topic, commit_log_offset=e.commit_log_offset, via="pop")
        self.counters.by_topic[(group, topic)][1] += 1
        await self.journal.append({"k": "A", "g": group, "t": topic, "q": key[2], "o": e.offset})
        return AckStatus.OK

    async def change_invisible(self, *, group: str, topic: str, receipt_handle: str,
                               invisible_ms: int) -> tuple[AckStatus, str | None]:
        """Make a received message invisible for ``invisible_ms`` from now; the new handle
        replaces the one given (which then answers EXPIRED). 0 makes it visible again at once (a
        negative acknowledgement: the next receive redelivers it). ValueError for a time out of range."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise ValueError(f"invisible time {invisible_ms} ms out of range: 0..{MAX_INVISIBLE_MS} ms")
        found = self._lookup(group, topic, receipt_handle)
        if isinstance(found, AckStatus):
            self.counters.refused_handles += 1
            return (AckStatus.EXPIRED if found is AckStatus.OK else found), None
        key, st, e = found
        self._seq += 1
        e.seq, e.deadline_ms = self._seq, now_ms() + invisible_ms
        self._revival.add(key, e)
        self._revive_changed.set()
        self.counters.changed += 1
        handle = receipt.Receipt(key[2], e.offset, e.commit_log_offset, e.attempt, e.seq, e.deadline_ms,
                                 self.ctx.config.broker_name).encode(group, topic)
        await self.journal.append({"k": "C", "g": group, "t": topic, "q": key[2], "o": e.offset, "s": e.seq,
                                   "d": e.deadline_ms})
        return AckStatus.OK, handle

    def _lookup(self, group: str, topic: str, handle: str):
        """(queue key, state, entry) for a current handle, else the AckStatus to answer
        (OK: the message was acked already)."""
        r = receipt.decode(handle, group, topic)
        if r is None or r.broker_name != self.ctx.config.broker_name:
            return AckStatus.INVALID_HANDLE
        key = (group, topic, r.queue_id)
        st = self._queues.get(key)
        if st is None:
            return AckStatus.INVALID_HANDLE
        e = st.inflight.get(r.queue_offset)
        if e is None:
            # received before (below the received mark) and no longer out: acked or dead-lettered
            return AckStatus.OK if r.queue_offset < st.next_offset and r.seq <= self._seq else AckStatus.INVALID_HANDLE
        if e.commit_log_offset != r.commit_log_offset:
            return AckStatus.INVALID_HANDLE
        if e.seq != r.seq:
            return AckStatus.EXPIRED if r.seq < e.seq else AckStatus.INVALID_HANDLE
        return key, st, e

    def _finish(self, key: QueueKey, st: QueueState, offset: int) -> None:
        st.inflight.pop(offset, None)
        self._commit_offset(key, st)
        self._wake(key[1])  # a FIFO queue may be free now

    def _commit_offset(self, key: QueueKey, st: QueueState) -> None:
        group, topic, queue_id = key
        offset = st.consume_offset
        if self.ctx.offsets.query(group, topic, queue_id) != offset:
            self.ctx.offsets.commit(group, topic, queue_id, offset)

    # ------------------------------------------------------------------ redelivery and DLQ

    async def _revive_loop(self) -> None:
        """Wake held receives when messages become visible again; move messages that used up
        their attempts to the DLQ even when nobody receives."""
        while not self._closed:
            now = now_ms()
            due_topics: set[str] = set()
            for _, seq, key, offset in self._revival.due(now):
                st = self._queues.get(key)
                e = st.inflight.get(offset) if st is not None else None
                if e is None or e.seq != seq:
                    continue
                due_topics.add(key[1])
                group_config = self.ctx.groups.get(key[0])
                max_attempts = (group_config.retry_max_times if group_config else 16) + 1
                if e.attempt >= max_attempts:
                    async with st.lock:
                        if st.inflight.get(offset) is e and e.seq == seq:
                            try:
                                await self._dead_letter(key, st, e)
                            except Exception:  # a store or journal failure must not end the revive task
                                log.exception("pop: moving %s/%d@%d of group %s to its DLQ failed; trying again later",
                                              key[1], key[2], offset, key[0])
                                e.deadline_ms = now_ms() + DLQ_RETRY_MS
                                self._revival.add(key, e)
            for topic in due_topics:
                self._wake(topic)
            self._revive_changed.clear()
            next_deadline = self._revival.next_deadline()
            timeout = (next_deadline - now_ms()) / 1000 if next_deadline is not None else None
            try:
                async with asyncio.timeout(max(timeout, 0.001) if timeout is not None else None):
                    await self._revive_changed.wait()
            except TimeoutError:
                pass

    @property
    def scheduled_deadlines(self) -> int:
        """Deadlines the revive task holds (live ones and not yet discarded stale ones)."""
        return len(self._revival)

    def _in_flight(self) -> Iterator[tuple[QueueKey, InFlight]]:
        """Every delivery out with a consumer (the revival schedule rebuilds from these)."""
        return ((key, e) for key, st in self._queues.items() for e in st.inflight.values())

    async def _dead_letter(self, key: QueueKey, st: QueueState, e: InFlight) -> None:
        group, topic, queue_id = key
        result = await self.retry.send_back(SendBackRequest(group, e.commit_log_offset, -1, None,
                                                            reconsume_times=e.attempt - 1))
        if result.code != ResponseCode.SUCCESS:
            log.warning("pop: moving %s/%d@%d of group %s to its DLQ failed (%s); trying again later", topic,
                        queue_id, e.offset, group, result.remark)
            e.deadline_ms = now_ms() + DLQ_RETRY_MS
            self._revival.add(key, e)
            return
        log.info("pop: message %s/%d@%d of group %s was delivered %d times without an ack: moved to %s",
                 topic, queue_id, e.offset, group, e.attempt, result.topic)
        self._finish(key, st, e.offset)
        self.counters.dead_lettered += 1
        await self.journal.append({"k": "A", "g": group, "t": topic, "q": queue_id, "o": e.offset})

    # ------------------------------------------------------------------ arrivals, ownership, lag

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt] = ()) -> None:
        """Store arrival listener: wake the receives held for this topic."""
        self._waiters.wake(topic, msgs)

    def _wake(self, topic: str, msgs: Sequence[MessageExt] = ()) -> None:
        self._waiters.wake(topic, msgs)

    def pop_active(self, group: str, topic: str) -> bool:
        """Whether the group consumes ``topic`` by POP now: a receive is held or happened within
        POP_ACTIVE_SECONDS, or one of its messages is out with a POP consumer."""
        if self.receivers.active(group, topic):
            return True
        now = now_ms()
        return any(st.blocked(now) for st in self._by_group_topic.get((group, topic), ()))

    def classic_pull_refusal(self, group: str, topic: str) -> str | None:
        """The remark to refuse a classic pull of ``topic`` by ``group`` with, or None to serve it."""
        if not self.pop_active(group, topic):
            return None
        return (f"consumer group [{group}] consumes topic [{topic}] by POP (receives within the last "
                f"{POP_ACTIVE_SECONDS:.0f} s or messages in flight): a group's queues are consumed by POP or by "
                f"classic consumers, not both")

    def lag(self, group: str, topic: str) -> dict:
        """Per queue id: messages not yet received, in flight (invisible), visible again
        (waiting for redelivery), and the group's consume offset."""
        now = now_ms()
        out = {}
        for (g, t, queue_id), st in sorted(self._queues.items()):
            if g != group or t != topic:
                continue
            invisible = st.invisible(now)
            out[queue_id] = {
                "not_received": max(0, self.ctx.store.max_offset(topic, queue_id) - st.next_offset),
                "in_flight": invisible,
                "visible_again": len(st.inflight) - invisible,
                "consume_offset": st.consume_offset,
                "next_offset": st.next_offset,
            }
        return out

    def in_flight_by_group(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(group, topic) -> (invisible now, visible again awaiting redelivery)."""
        now = now_ms()
        out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for (g, t, _), st in self._queues.items():
            invisible = st.invisible(now)
            out[(g, t)][0] += invisible
            out[(g, t)][1] += len(st.inflight) - invisible
        return {k: (v[0], v[1]) for k, v in out.items()}


def _pop_record(key: QueueKey, next_offset: int, entries, kind: str = "P") -> Record:
    group, topic, queue_id = key
    return {"k": kind, "g": group, "t": topic, "q": queue_id, "n": next_offset, "m": [e.to_list() for e in entries]}


def _log_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("pop journal: a receive's record was not written: %s", fut.exception())
