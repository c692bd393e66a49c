"""Firing RocketMQ 5 timers (docs/timers.md#firing): on a master, each second's slot of the
timing store is delivered once the second is over: every message is stored again under its real
topic and queue, without its timer properties.

Runs on the event loop; the timing store is reached only through the store's methods (worker
threads). It sleeps until the next slot with timers is over, or until a timer arrives (no
polling). A slot is recorded as fired only after its puts were accepted, so a crash may deliver
a slot twice, never skip it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.recall import is_recall_marker, is_recalled
from ferrymq.broker.schedule import copy_to_real_destination
from ferrymq.broker.timer_send import TIMER_PROPS
from ferrymq.common.message import MessageExt, Prop, decode_record
from ferrymq.common.protocol import TIMER_TOPIC
from ferrymq.store.timer_log import RECALL_MARKER, TimerRecord

log = logging.getLogger(__name__)

RETRY_AFTER_FAILED_PUT = 1.0  # s; a slot is retried until its puts are accepted
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

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt]) -> None:
        """Store arrival listener: a new timer may be due before the one being waited for."""
        if topic == TIMER_TOPIC:
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
            # A slot holds the timers due within its second: it fires once that second is over.
            over = now_ms() - self.precision_ms
            taken = await store.take_timers(over)
            if taken is not None:
                await self._deliver_slot(taken.records, taken.markers)
                if taken.last:  # a slot of many timers comes in parts: fired once all went out
                    await store.mark_timers_fired(taken.slot_ms + self.precision_ms)
                continue
            await store.mark_timers_fired(over - over % self.precision_ms + self.precision_ms)
            due = await store.next_timer_due(now_ms() + LOOK_AHEAD_MS)
            wait = None if due is None else max(0.0, (due + self.precision_ms - now_ms()) / 1000)
            try:
                await asyncio.wait_for(self._arrived.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _deliver_slot(self, records: list[TimerRecord], markers: list[TimerRecord]) -> None:
        """Deliver a slot's messages (``records``: a part of it) but recall markers and what they
        recall (docs/timers.md#recall: a marker is filed in the slot of the message it cancels and
        flagged in the TimerLog; ``markers`` are the whole slot's, so only they are read ahead; the
        messages are read one at a time as they go out)."""
        later = now_ms() + self.precision_ms  # a record due after this is of a later round (docs/timers.md, rounds)
        recalled: set[str] = set()
        for record in markers:
            if record.deliver_ms <= later:
                marker = await self._read(record)
                if marker is not None and is_recall_marker(marker):
                    recalled.add(marker.properties[Prop.TIMER_DEL_UNIQKEY])
        for record in records:
            roll = record.deliver_ms > later
            if record.flags & RECALL_MARKER and not roll:
                continue  # a marker is never delivered
            msg = await self._read(record)
            if msg is None:
                continue
            if not roll:
                if is_recall_marker(msg):
                    continue  # unflagged (written before the TimerLog had flags)
                if is_recalled(msg, recalled):
                    self.recalled += 1
                    self._uncount(msg, record)
                    continue
            while not await self._deliver(record, msg, roll):
                await asyncio.sleep(RETRY_AFTER_FAILED_PUT)

    async def _read(self, record: TimerRecord) -> MessageExt | None:
        """The timer-topic message ``record`` points to; None (logged) if it is gone or unreadable."""
        data = await self.ctx.store.look_message(record.phys)
        if data is None:
            log.error("timer message at CommitLog offset %d is gone (retention?); skipped", record.phys)
            return None
        try:
            return decode_record(data)[0]
        except ValueError as e:
            log.error("timer message at CommitLog offset %d is unreadable (%s); skipped", record.phys, e)
            return None

    async def _deliver(self, record: TimerRecord, msg: MessageExt, roll: bool) -> bool:
        """Store one timer's message where it goes (``roll``: again under the timer topic, for a
        later round); False if the store refused it (retry)."""
        if roll:
            out = MessageExt(topic=TIMER_TOPIC, body=msg.body, flag=msg.flag, properties=dict(msg.properties),
                             queue_id=0, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                             born_host=msg.born_host, store_host=self.ctx.store_host,
                             reconsume_times=msg.reconsume_times)
            self.rolled += 1
        else:
            out = copy_to_real_destination(msg, self.ctx.store_host, TIMER_PROPS)
            if out is None:
                self._uncount(msg, record)
                return True
        result = await self.ctx.store.put_message(out)
        if not result.ok:
            log.warning("delivering timer message %s to %s failed: %s; retrying in %.0f s",
                        msg.properties.get(Prop.UNIQ_KEY), out.topic, result.remark or result.status.name,
                        RETRY_AFTER_FAILED_PUT)
            return False
        if not record.flags & RECALL_MARKER:  # a marker is not counted as waiting
            self._uncount(msg, record, fired=out.topic != TIMER_TOPIC)
        if out.topic != TIMER_TOPIC:
            self.fired += 1
            late = max(0, now_ms() - record.deliver_ms)
            if self.on_late is not None:
                self.on_late(late / 1000)
            self.ctx.stats.record_put(out.topic, 1, result.wrote_bytes)
        return True

    def _uncount(self, msg: MessageExt, record: TimerRecord, *, fired: bool = True) -> None:
        """The timer no longer waits: fired, skipped, or stored again (counted anew when indexed)."""
        pending = self.ctx.store.pending_timers
        if pending is not None:
            pending.remove(msg.properties.get(Prop.REAL_TOPIC, ""), record.deliver_ms, fired=fired)
