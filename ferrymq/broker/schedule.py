"""Delay levels (RocketMQ's ScheduleMessageService): messages due later wait in SCHEDULE_TOPIC_XXXX.

A message sent with DELAY level n (or a consumer's send-back) is stored in
``SCHEDULE_TOPIC_XXXX`` queue n-1 with its real topic and queue in REAL_TOPIC / REAL_QID.
Every level's queue holds messages in the order they become due (same delay, rising store
time), so one task per level walks its queue from a saved offset: it stores each due
message again under its real topic and queue (new physical offset, same UNIQ_KEY, DELAY
removed), then advances and persists the level's offset in ``config/delayOffset.json``
(fastjson form ``{"offsetTable":{1:12}}``). Delivery comes before the offset is saved, so a
crash can repeat a delivery but never lose one; after a restart each level resumes from
its saved offset. A task sleeps until its next message is due, or, on an empty queue,
until a new message is stored in it (no polling).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Sequence

from ferrymq.broker.context import BrokerContext
from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common import rocketmq_json
from ferrymq.common.message import MessageExt, Prop, SysFlag, decode_record
from ferrymq.common.protocol import SCHEDULE_TOPIC
from ferrymq.store.results import GetStatus


log = logging.getLogger(__name__)

SCHEDULE_GROUP = "SCHEDULE_CONSUMER"  # only labels the store reads
BATCH = 32
RETRY_AFTER_FAILED_PUT = 10.0  # RocketMQ's DELAY_FOR_A_PERIOD
_EMPTY = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE)


def is_delayable(msg: MessageExt) -> bool:
    """Prepared and rollback transaction records are never delayed (they are not dispatched)."""
    return msg.delay_level > 0 and SysFlag.transaction_type(msg.sys_flag) in (
        SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


def divert_to_schedule(msg: MessageExt, level_count: int) -> None:
    """Re-address a delayed message to its level's queue, remembering where it really goes."""
    level = min(msg.delay_level, level_count)
    msg.delay_level = level
    msg.properties[Prop.REAL_TOPIC] = msg.topic
    msg.properties[Prop.REAL_QID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1


def copy_to_real_destination(msg: MessageExt, store_host: tuple[str, int],
                             drop: Sequence[str]) -> MessageExt | None:
    """A waiting message (delay level or timer) as it is stored when due: under its REAL_TOPIC /
    REAL_QID, without the properties in ``drop``, everything else kept. None (logged) if it
    does not say where it goes."""
    real_topic = msg.properties.get(Prop.REAL_TOPIC)
    try:
        real_qid = int(msg.properties.get(Prop.REAL_QID, ""))
    except ValueError:
        real_qid = -1
    if not real_topic or real_qid < 0:
        log.error("%s message at offset %d has no real topic/queue (%r/%r); skipped", msg.topic, msg.commit_log_offset,
                  real_topic, msg.properties.get(Prop.REAL_QID))
        return None
    props = {k: v for k, v in msg.properties.items() if k not in drop}
    return MessageExt(topic=real_topic, body=msg.body, flag=msg.flag, properties=props, queue_id=real_qid,
                      sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                      store_host=store_host, reconsume_times=msg.reconsume_times)


class ScheduleMessageService:
    def __init__(self, ctx: BrokerContext, config_dir: Path) -> None:
        self.ctx = ctx
        self.levels_ms = ctx.store_config.delay_level_millis()
        self.offsets: dict[int, int] = {}  # level -> next SCHEDULE_TOPIC_XXXX offset to deliver
        self.delivered = 0
        self._file = JsonConfigFile(config_dir / "delayOffset.json")
        self._arrivals = {level: asyncio.Event() for level in range(1, len(self.levels_ms) + 1)}

    @property
    def level_count(self) -> int:
        return len(self.levels_ms)

    def load(self) -> None:
        data = self._file.load() or {}
        for level, offset in (data.get("offsetTable") or {}).items():
            self.offsets[int(level)] = int(offset)

    def render(self) -> str:
        return rocketmq_json.dumps({"offsetTable": dict(sorted(self.offsets.items()))}, indent=2)

    async def persist(self) -> None:
        await self._file.save(self.render)

    def start(self) -> None:
        for level in self._arrivals:
            self.ctx.spawn(self._run_level(level), f"delay-level-{level}")

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, msgs: Sequence[MessageExt]) -> None:
        """Store arrival listener: wake the level whose queue just got a message."""
        if topic == SCHEDULE_TOPIC:
            event = self._arrivals.get(queue_id + 1)
            if event is not None:
                event.set()

    def deliver_time(self, msg: MessageExt, level: int, now_ms: int) -> int:
        """When a message of ``level`` is due. A store time ahead of the clock (the clock was set
        back) is not waited out: RocketMQ's correctDeliverTimestamp delivers such messages now."""
        due = msg.store_timestamp + self.levels_ms[level - 1]
        return now_ms if due > now_ms + self.levels_ms[level - 1] else due

    async def _run_level(self, level: int) -> None:
        while True:
            try:
                await self._walk_level(level)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A level must never stop for good: its messages would wait forever.
                log.exception("delay level %d failed; retrying in %.0f s", level, RETRY_AFTER_FAILED_PUT)
                await asyncio.sleep(RETRY_AFTER_FAILED_PUT)

    async def _walk_level(self, level: int) -> None:
        store, arrived = self.ctx.store, self._arrivals[level]
        while True:
            offset = self.offsets.get(level, 0)
            arrived.clear()  # before the read: an arrival during it is not missed
            result = await store.get_messages(SCHEDULE_GROUP, SCHEDULE_TOPIC, level - 1, offset, BATCH)
            if result.status in _EMPTY and result.next_begin_offset == offset:
                await arrived.wait()
                continue
            if not result.records:  # offset fell out of the queue or its data was removed
                log.warning("delay level %d: offset %d moved to %d (%s)", level, offset, result.next_begin_offset,
                            result.status.name)
                self.offsets[level] = result.next_begin_offset
                await self.persist()
                continue
            wait = await self._deliver_due(level, result.records)
            if wait > 0:
                # The next message is not due yet; a newer arrival is due even later.
                await asyncio.sleep(wait)

    async def _deliver_due(self, level: int, records: list[bytes]) -> float:
        """Deliver the due prefix of ``records``; returns seconds until the next one is due (0: go on)."""
        advanced = False
        wait = 0.0
        try:
            for record in records:
                try:
                    msg = decode_record(record)[0]
                except ValueError as e:  # unreadable: nothing to deliver, do not block the level
                    log.error("delay level %d: undecodable record skipped: %s", level, e)
                    self.offsets[level] = self.offsets.get(level, 0) + 1
                    advanced = True
                    continue
                now = int(time.time() * 1000)
                due = self.deliver_time(msg, level, now)
                if due > now:
                    wait = (due - now) / 1000
                    break
                if not await self._deliver(msg):
                    wait = RETRY_AFTER_FAILED_PUT
                    break
                self.offsets[level] = msg.queue_offset + 1
                advanced = True
        finally:
            if advanced:
                await asyncio.shield(self.persist())
        return wait

    async def _deliver(self, msg: MessageExt) -> bool:
        """Store ``msg`` under its real topic and queue; False if the store refused it."""
        out = copy_to_real_destination(msg, self.ctx.store_host, (Prop.DELAY,))
        if out is None:
            return True
        result = await self.ctx.store.put_message(out)
        if not result.ok:
            log.warning("delivering delayed message %s to %s failed: %s; retrying in %.0f s",
                        msg.client_msg_id, out.topic, result.remark or result.status.name, RETRY_AFTER_FAILED_PUT)
            return False
        self.delivered += 1
        self.ctx.stats.record_put(out.topic, 1, result.wrote_bytes)
        return True
