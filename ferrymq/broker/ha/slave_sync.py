"""A slave's copy of its master's metadata (RocketMQ's SlaveSynchronize): topic configs
(GET_ALL_TOPIC_CONFIG, 21), consumer offsets (GET_ALL_CONSUMER_OFFSET, 43), delay-level
offsets (GET_ALL_DELAY_OFFSET, 45) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
201), fetched over the broker's remoting client from the master's address (what the name
server's REGISTER_BROKER answer calls masterAddr). Topic and group tables are replaced when
the master's data version differs; offsets are merged over the slave's, as RocketMQ does.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common import rocketmq_json
from ferrymq.common.protocol import DataVersion, SubscriptionGroupConfig, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

_TIMEOUT_S = 3.0


class SlaveSynchronize:
    def __init__(self, client: RemotingClient, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, schedule: ScheduleMessageService,
                 persist: Callable[[], Awaitable[None]]) -> None:
        """``persist``: writes the tables (all four) to disk."""
        self.client = client
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.schedule = schedule
        self._persist = persist
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

    async def _fetch(self, addr: str, code: int) -> dict:
        response = await self.client.invoke(addr, RemotingCommand.request(code), _TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"master {addr} answered request {code} with {response.code}: {response.remark}")
        return rocketmq_json.loads(response.body or b"{}")

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
        for key, queues in (data.get("offsetTable") or {}).items():
            self.offsets.table[key] = {int(q): int(o) for q, o in queues.items()}

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

