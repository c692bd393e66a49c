"""Broker protection (RocketMQ's protectBroker): disable a group that reads too far behind.

Each pull records how many CommitLog bytes lie between the last record it read and the
head (its queue's "fall-behind"). A group reading far behind the head makes the broker
read cold data from disk for everyone; with ``disableConsumeIfConsumerReadSlowly`` on, a
periodic check turns such a group's consumeEnable off (persisted, logged, counted). Its
pulls are then refused with NO_PERMISSION until an admin re-enables it; re-enabling clears
what was recorded for the group, so it is judged on the pulls it makes from then on.
"""

from __future__ import annotations

import logging

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager

log = logging.getLogger(__name__)


class ConsumeProtection:
    def __init__(self, config: BrokerConfig, groups: SubscriptionGroupManager) -> None:
        self.config = config
        self.groups = groups
        # (group, topic, queue id) -> fall-behind bytes at the group's latest pull of that queue
        self.fall_behind: dict[tuple[str, str, int], int] = {}
        self.groups_disabled = 0  # counted for runtime info / metrics

    def record(self, group: str, topic: str, queue_id: int, fall_behind_bytes: int) -> None:
        self.fall_behind[(group, topic, queue_id)] = fall_behind_bytes

    def group_fall_behind(self, group: str) -> int:
        """The largest fall-behind recorded for any queue the group pulls."""
        return max((v for (g, _, _), v in self.fall_behind.items() if g == group), default=0)

    def forget_group(self, group: str) -> None:
        for key in [k for k in self.fall_behind if k[0] == group]:
            del self.fall_behind[key]

    async def check(self) -> list[str]:
        """One protection pass; returns the groups it disabled."""
        config = self.config
        if not config.disable_consume_if_consumer_read_slowly:
            return []
        threshold = config.consumer_fallbehind_threshold
        disabled = []
        for (group, topic, queue_id), behind in list(self.fall_behind.items()):
            if behind <= threshold or group in disabled:
                continue
            group_config = self.groups.get(group)
            if group_config is None or not group_config.consume_enable:
                continue
            log.warning("[PROTECT_BROKER] the consumer[%s] consume slowly, %d bytes behind on %s queue %d "
                        "(threshold %d), disable it", group, behind, topic, queue_id, threshold)
            self.groups.disable_consume(group)
            self.groups_disabled += 1
            disabled.append(group)
        if disabled:
            await self.groups.persist()
        return disabled
