"""Requests the broker sends to its clients: NOTIFY_CONSUMER_IDS_CHANGED (40), so that every
member of a consumer group rebalances at once when the group's membership changes, and
RESET_CONSUMER_CLIENT_OFFSET (220) after an admin reset a group's offsets."""

from __future__ import annotations

import logging

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_manager import ConsumerGroupInfo
from ferrymq.broker.context import Spawn
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import ConsumerGroupHeader, ResetOffsetHeader

log = logging.getLogger(__name__)


class ClientNotifier:
    def __init__(self, config: BrokerConfig, groups: SubscriptionGroupManager, spawn: Spawn) -> None:
        self.config = config
        self.groups = groups
        self.spawn = spawn

    def group_changed(self, info: ConsumerGroupInfo) -> None:
        """Tell every member of the group to rebalance now (oneway, best effort), unless the
        broker (notifyConsumerIdsChangedEnable) or the group turned that off."""
        if not self.config.notify_consumer_ids_changed_enable:
            return
        group_config = self.groups.get(info.group_name)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return
        for channel in list(info.channels.values()):
            self.spawn(self._notify(channel.connection, info.group_name), f"notify-{info.group_name}")

    @staticmethod
    async def _notify(conn: Connection, group: str) -> None:
        try:
            await conn.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                            ConsumerGroupHeader(consumer_group=group).to_ext_fields()))
        except RemotingError as e:
            log.debug("notify %s of group %s change failed: %s", conn.remote_address, group, e)

    async def offsets_reset(self, info: ConsumerGroupInfo | None, topic: str, timestamp: int, force: bool,
                            body: bytes) -> None:
        """Tell the group's online members their offsets of ``topic`` changed (``body``: the
        new offset table), so they drop what they hold and pull from there."""
        for channel in list(info.channels.values()) if info else []:
            notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ResetOffsetHeader(
                topic=topic, group=info.group_name, timestamp=timestamp, is_force=force).to_ext_fields(), body)
            try:
                await channel.connection.invoke_oneway(notice)
            except RemotingError as e:
                log.warning("telling %s about the offset reset of %s failed: %s", channel.client_id, info.group_name, e)
