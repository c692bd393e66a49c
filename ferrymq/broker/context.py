"""What the broker's processors and services share: its settings, the store and its tables.

Not the broker itself: no server, no lifecycle, no name-server registration. Each processor
gets this plus the services it calls (schedule, retry, protection) by name, so what a
processor may touch is visible in its constructor.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Coroutine

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_manager import ConsumerManager
from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.lock_manager import QueueLockManager
from ferrymq.broker.long_polling import PullWaiters
from ferrymq.broker.message_tracing import NO_TRACING, MessageTracing
from ferrymq.broker.stats import BrokerStats
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.config import StoreConfig

Spawn = Callable[[Coroutine, str], asyncio.Task]  # start a background task the broker owns


@dataclass(frozen=True)
class BrokerContext:
    config: BrokerConfig
    store_config: StoreConfig
    store: AsyncMessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    locks: QueueLockManager
    pull_waiters: PullWaiters
    stats: BrokerStats
    spawn: Spawn
    tracing: MessageTracing = NO_TRACING  # OpenTelemetry spans of traced messages

    @property
    def store_host(self) -> tuple[str, int]:
        """STOREHOST of records this broker writes (set once the store has loaded)."""
        return self.store.store_host
