"""A slave's copy of its master's metadata (RocketMQ's SlaveSynchronize): topic configs
(GET_ALL_TOPIC_CONFIG, 21), consumer offsets (GET_ALL_CONSUMER_OFFSET, 43), delay-level
offsets (GET_ALL_DELAY_OFFSET, 45) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
201), fetched over the broker's remoting client from the master's address (what the name
server's REGISTER_BROKER answer calls masterAddr). Topic and group tables are replaced when
the master's data version differs; offsets are merged over the slave's, as RocketMQ does, and
the slave takes the offset table's data version with them (none from a 4.x master).

The timer checkpoint (GET_TIMER_CHECK_POINT, 60) is copied more often, on its own schedule
(``sync_timer_checkpoint``): its fired-up-to time moves the slave's forward, never back, so a
promoted slave neither re-fires what its master fired nor skips what it had not
(docs/timers.md#slaves).
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common import rocketmq_json
from ferrymq.common.consumer_protocol import ConsumerOffsetSerializeWrapper
from ferrymq.common.protocol import (
    DataVersion,
    SubscriptionGroupConfig,
    TimerCheckpointBody,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

_TIMEOUT_S = 3.0
TIMER_CHECKPOINT_INTERVAL = 3.0  # s between timer checkpoint copies (Apache's: latency-sensitive)


class SlaveSynchronize:
    def __init__(self, client: RemotingClient, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, schedule: ScheduleMessageService,
                 persist: Callable[[], Awaitable[None]],
                 adopt_timers_fired: Callable[[int], Awaitable[bool]] | None = None) -> None:
        """``persist``: writes the tables (all four) to disk. ``adopt_timers_fired``: moves the
        timing store's fired-up-to time forward and persists it (None: timers are off here)."""
        self.client = client
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.schedule = schedule
        self._persist = persist
        self._adopt_timers_fired = adopt_timers_fired
        self._timer_sync_error: str | None = None  # the last refusal logged
        self.master_addr: str | None = None
        self.synced = 0  # completed rounds

    async def sync_all(self) -> None:
        """One round; a master not known yet is no error (the next registration tells it)."""
        addr = self.master_addr
        if not addr:
            return
        changed = await self._sync_topics(addr)
        await self._sync_offsets(addr)
        await self._sync_delay_offsets(addr)
        await self._sync_groups(addr)
        await self._persist()
        self.synced += 1
        if changed and self.topics.on_change is not None:
            self.topics.on_change()  # registered with the name servers at once (the version is the master's)

    async def sync_timer_checkpoint(self) -> None:
        """Copy the master's fired-up-to time. A refusal (a master without timers) or a body that
        is not a timer checkpoint is logged, once until the answer changes."""
        addr = self.master_addr
        if not addr or self._adopt_timers_fired is None:
            return
        try:
            body = TimerCheckpointBody.decode(await self._fetch_body(addr, RequestCode.GET_TIMER_CHECK_POINT))
        except (RuntimeError, ValueError) as e:
            if str(e) != self._timer_sync_error:
                log.warning("timer checkpoint not copied from master %s: %s", addr, e)
            self._timer_sync_error = str(e)
            return
        self._timer_sync_error = None
        if await self._adopt_timers_fired(body.last_read_time_ms):
            log.debug("timers fired up to %d, as master %s says", body.last_read_time_ms, addr)

    async def _fetch(self, addr: str, code: int) -> dict:
        return rocketmq_json.loads(await self._fetch_body(addr, code) or b"{}")

    async def _fetch_body(self, addr: str, code: int) -> bytes:
        response = await self.client.invoke(addr, RemotingCommand.request(code), _TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"master {addr} answered request {code} with {response.code}: {response.remark}")
        return response.body or b""

    async def _sync_topics(self, addr: str) -> bool:
        wrapper = TopicConfigSerializeWrapper.from_dict(await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        if wrapper.data_version.to_dict() == self.topics.data_version.to_dict():
            return False
        self.topics.table.clear()
        self.topics.table.update(wrapper.topic_config_table)
        self.topics.data_version = wrapper.data_version
        log.info("topic configs synchronized from master %s (%d topics)", addr, len(wrapper.topic_config_table))
        return True

    async def _sync_offsets(self, addr: str) -> None:
        data = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        self.offsets.adopt(ConsumerOffsetSerializeWrapper.from_dict(data))

    async def _sync_delay_offsets(self, addr: str) -> None:
        data = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        for level, offset in (data.get("offsetTable") or {}).items():
            self.schedule.offsets[int(level)] = int(offset)

    async def _sync_groups(self, addr: str) -> None:
        data = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        version = DataVersion.from_dict(data.get("dataVersion") or {})
        if version.to_dict() == self.groups.data_version.to_dict():
            return
        table = {name: SubscriptionGroupConfig.from_dict(raw)
                 for name, raw in (data.get("subscriptionGroupTable") or {}).items()}
        self.groups.table.clear()
        self.groups.table.update(table)
        self.groups.data_version = version
        log.info("subscription groups synchronized from master %s (%d groups)", addr, len(table))

