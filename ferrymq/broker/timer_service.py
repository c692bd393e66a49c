"""Firing RocketMQ 5 timers (docs/timers.md#firing): on a master, each second's slot of the
timing store is taken when its second begins and every message in it is stored again at its own
delivery time, under its real topic and queue, without its timer properties.

Runs on the event loop; the timing store is reached only through the store's methods (worker
threads), a run of messages at a time. It sleeps until the next slot with timers begins, or until
a timer due before that arrives (no polling). A slot is recorded as fired only after its puts were
accepted, so a crash may deliver a slot twice, never skip it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.recall import is_recall_marker, is_recalled
from ferrymq.broker.schedule import copy_to_real_destination
from ferrymq.common.message import MessageExt, Prop, decode_record
from ferrymq.common.protocol import TIMER_TOPIC
from ferrymq.common.tasks import within
from ferrymq.store.timer_log import RECALL_MARKER, TimerRecord

log = logging.getLogger(__name__)

RETRY_AFTER_FAILED_PUT = 1.0  # s; a slot is retried until its puts are accepted
PUT_RUN = 512  # timers read and stored again together (one reader call, one write per file)
LOOK_AHEAD_MS = 600_000  # how far ahead the next slot with timers is looked for (then: sleep on arrivals)


def now_ms() -> int:
    return int(time.time() * 1000)


class TimerService:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.precision_ms = ctx.store_config.timer_precision_ms
        self.fired = 0  # messages delivered
        self.rolled = 0  # records of a later round stored again under the timer topic
        self.recalled = 0  # messages not delivered: a recall marker named them
        self.on_late: Callable[[float], None] | None = None  # seconds late of each fired message (metrics)
        self._arrived = asyncio.Event()
        self._sleeps_until: int | None = None  # the slot the service waits for (None: any arrival wakes it)
        self._recalled: set[str] | None = None  # recall markers' keys of the slot being delivered

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt]) -> None:
        """Store arrival listener: wake the service for a timer due before the slot it sleeps
        until; note a recall marker for the slot being delivered (filed in a later slot, it
        would come too late for it)."""
        if topic != TIMER_TOPIC:
            return
        for msg in msgs:
            if self._recalled is not None and is_recall_marker(msg):
                self._recalled.add(msg.properties[Prop.TIMER_DEL_UNIQKEY])
            if self._arrived.is_set():
                continue
            try:
                due = int(msg.properties.get(Prop.TIMER_OUT_MS, ""))
            except ValueError:
                due = None
            if self._sleeps_until is None or due is None or due < self._sleeps_until:
                self._arrived.set()

    def start(self) -> None:
        if self.ctx.store.timers_enabled:
            self.ctx.spawn(self._run(), "timer-service")

    async def _run(self) -> None:
        await self.ctx.store.rewind_timers()  # resume from the fired checkpoint (at-least-once)
        while True:
            try:
                await self._fire_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer service failed; retrying in %.0f s", RETRY_AFTER_FAILED_PUT)
                await asyncio.sleep(RETRY_AFTER_FAILED_PUT)

    async def _fire_due(self) -> None:
        store = self.ctx.store
        while True:
            self._arrived.clear()  # before the read: an arrival during it is not missed
            self._sleeps_until = None
            # A slot holds the timers due within its second: taken when the second begins, each
            # message stored again at its own delivery time (docs/timers.md#firing).
            now = now_ms()
            taken = await store.take_timers(now)
            if taken is not None:
                await self._deliver_slot(taken.records, taken.markers)
                if taken.last:  # a slot of many timers comes in parts: fired once all went out
                    await store.mark_timers_fired(taken.slot_ms + self.precision_ms)
                continue
            # Every slot up to now's was taken and delivered; a timer arriving now is filed in
            # the next one (TimerStore files none in a taken slot).
            await store.mark_timers_fired(now - now % self.precision_ms + self.precision_ms)
            due = await store.next_timer_due(now_ms() + LOOK_AHEAD_MS)
            self._sleeps_until = due
            wait = None if due is None else max(0.0, (due - now_ms()) / 1000)
            try:
                await within(self._arrived.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _deliver_slot(self, records: list[TimerRecord], markers: list[TimerRecord]) -> None:
        """Deliver a slot's messages (``records``: a part of it), each at its delivery time, but
        recall markers and what they recall (docs/timers.md#recall: a marker is filed in the slot
        of the message it cancels and flagged in the TimerLog; ``markers`` are the whole slot's,
        so only they are read ahead; markers stored while the slot is delivered are heard of as
        they arrive). Records of a later round are rolled at once. The messages go out at most
        ``PUT_RUN`` at a time: read together, stored together."""
        later = now_ms() + self.precision_ms  # a record due after this is of a later round (docs/timers.md, rounds)
        self._recalled = recalled = set()
        try:
            for _, marker in await self._read([r for r in markers if r.deliver_ms <= later]):
                if is_recall_marker(marker):
                    recalled.add(marker.properties[Prop.TIMER_DEL_UNIQKEY])
            rolled = [r for r in records if r.deliver_ms > later]
            # A marker is never delivered; one of a later round is rolled with the rest of its slot.
            due = sorted((r for r in records if r.deliver_ms <= later and not r.flags & RECALL_MARKER),
                         key=lambda r: r.deliver_ms)  # stable: arrival order within a millisecond
            for start in range(0, len(rolled), PUT_RUN):
                await self._deliver_run(rolled[start:start + PUT_RUN], recalled, roll=True)
            start = 0
            while start < len(due):
                now = now_ms()
                if due[start].deliver_ms > now:
                    await asyncio.sleep((due[start].deliver_ms - now) / 1000)
                    continue
                end = start
                while end < len(due) and end - start < PUT_RUN and due[end].deliver_ms <= now:
                    end += 1
                await self._deliver_run(due[start:end], recalled, roll=False)
                start = end
        finally:
            self._recalled = None

    async def _deliver_run(self, records: list[TimerRecord], recalled: set[str], *, roll: bool) -> None:
        """Read ``records``' messages together and store them together where they go."""
        run: list[tuple[TimerRecord, MessageExt, MessageExt]] = []
        for record, msg in await self._read(records):
            if not roll:
                if is_recall_marker(msg):
                    continue  # unflagged (written before the TimerLog had flags)
                if is_recalled(msg, recalled):
                    self.recalled += 1
                    self._uncount(msg, record)
                    continue
            out = self._outgoing(record, msg, roll)
            if out is not None:
                run.append((record, msg, out))
        await self._store(run)

    async def _read(self, records: list[TimerRecord]) -> list[tuple[TimerRecord, MessageExt]]:
        """The timer-topic messages ``records`` point to, read in one store call; one that is
        gone or unreadable is logged and left out."""
        if not records:
            return []
        found = []
        for record, data in zip(records, await self.ctx.store.look_messages([r.phys for r in records])):
            if data is None:
                log.error("timer message at CommitLog offset %d is gone (retention?); skipped", record.phys)
                continue
            try:
                found.append((record, decode_record(data)[0]))
            except ValueError as e:
                log.error("timer message at CommitLog offset %d is unreadable (%s); skipped", record.phys, e)
        return found

    def _outgoing(self, record: TimerRecord, msg: MessageExt, roll: bool) -> MessageExt | None:
        """What one timer's message is stored as: again under the timer topic for a later round
        (``roll``), else under its real topic and queue; None (uncounted) if it names none."""
        # As Apache 5: when the timer took the message in (its timer-topic record's store time)
        # and let it out; a rolled copy counts its rounds.
        stamps = {Prop.TIMER_ENQUEUE_MS: str(msg.store_timestamp), Prop.TIMER_DEQUEUE_MS: str(now_ms())}
        if roll:
            rolls = msg.properties.get(Prop.TIMER_ROLL_TIMES, "0")
            stamps[Prop.TIMER_ROLL_TIMES] = str(int(rolls) + 1 if rolls.isdigit() else 1)
            return MessageExt(topic=TIMER_TOPIC, body=msg.body, flag=msg.flag, properties={**msg.properties, **stamps},
                              queue_id=0, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                              born_host=msg.born_host, store_host=self.ctx.store_host,
                              reconsume_times=msg.reconsume_times)
        out = copy_to_real_destination(msg, self.ctx.store_host, ())
        if out is None:
            self._uncount(msg, record)
        else:
            out.properties.update(stamps)
        return out

    async def _store(self, run: list[tuple[TimerRecord, MessageExt, MessageExt]]) -> None:
        """Store a run of outgoing messages together; those the store refused are retried (after
        ``RETRY_AFTER_FAILED_PUT``) until it takes them."""
        while run:
            results = await self.ctx.store.put_group([out for _, _, out in run])
            refused = []
            for item, result in zip(run, results):
                if result.ok:
                    self._stored(*item, result.wrote_bytes)
                else:
                    refused.append((item, result))
            if refused:
                (_, msg, out), result = refused[0]
                log.warning("delivering %d timer messages failed (first: %s to %s: %s); retrying in %.0f s",
                            len(refused), msg.properties.get(Prop.UNIQ_KEY), out.topic,
                            result.remark or result.status.name, RETRY_AFTER_FAILED_PUT)
                await asyncio.sleep(RETRY_AFTER_FAILED_PUT)
            run = [item for item, _ in refused]

    def _stored(self, record: TimerRecord, msg: MessageExt, out: MessageExt, wrote_bytes: int) -> None:
        """Account for one timer's message stored where it goes."""
        if not record.flags & RECALL_MARKER:  # a marker is not counted as waiting
            self._uncount(msg, record, fired=out.topic != TIMER_TOPIC)
        if out.topic == TIMER_TOPIC:
            self.rolled += 1
            return
        self.fired += 1
        if self.on_late is not None:
            self.on_late(max(0, now_ms() - record.deliver_ms) / 1000)
        self.ctx.stats.record_put(out.topic, 1, wrote_bytes)

    def _uncount(self, msg: MessageExt, record: TimerRecord, *, fired: bool = True) -> None:
        """The timer no longer waits: fired, skipped, or stored again (counted anew when indexed)."""
        pending = self.ctx.store.pending_timers
        if pending is not None:
            pending.remove(msg.properties.get(Prop.REAL_TOPIC, ""), record.deliver_ms, fired=fired)
