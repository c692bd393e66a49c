"""Which clients are online in which consumer group, and what they subscribe.

Fed by HEART_BEAT, UNREGISTER_CLIENT and connection closes; expired after
``channelExpiredTimeout`` without a heartbeat. When a group's members or subscriptions
change, the group's other members are told (NOTIFY_CONSUMER_IDS_CHANGED) so they
rebalance at once instead of waiting for their 20 s timer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from ferrymq.common.protocol import ConsumerData, SubscriptionData
from ferrymq.remoting.connection import Connection

log = logging.getLogger(__name__)


@dataclass
class ClientChannel:
    client_id: str
    connection: Connection
    language: int
    version: int
    last_update: float = field(default_factory=time.monotonic)

    @property
    def client_addr(self) -> str:
        host, port = self.connection.remote_address[:2]
        return f"{host}:{port}"


@dataclass
class ConsumerGroupInfo:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ConsumerManager:
    def __init__(self, *, on_group_changed: Callable[[ConsumerGroupInfo], None] | None = None) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[Connection, ClientChannel]] = {}
        self.on_group_changed = on_group_changed

    def register_consumer(self, data: ConsumerData, channel: ClientChannel) -> bool:
        """Record a heartbeat; returns True when membership or subscriptions changed."""
        info = self.groups.get(data.group_name)
        if info is None:
            info = self.groups[data.group_name] = ConsumerGroupInfo(data.group_name)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        changed = False
        existing = info.channels.get(channel.connection)
        if existing is None or existing.client_id != channel.client_id:
            info.channels[channel.connection] = channel
            changed = True
            log.info("consumer %s joined group %s from %s", channel.client_id, data.group_name, channel.client_addr)
        else:
            existing.last_update = time.monotonic()
        new_subs = {s.topic: s for s in data.subscription_data_set}
        for topic, sub in new_subs.items():
            old = info.subscriptions.get(topic)
            if old is None or old.sub_string != sub.sub_string or old.sub_version < sub.sub_version:
                info.subscriptions[topic] = sub
                changed = True
        # Subscriptions nobody heartbeats any more are dropped (RocketMQ does the same).
        for topic in [t for t in info.subscriptions if t not in new_subs]:
            del info.subscriptions[topic]
            changed = True
        if changed and self.on_group_changed:
            self.on_group_changed(info)
        return changed

    def register_producer(self, group: str, channel: ClientChannel) -> None:
        channels = self.producers.setdefault(group, {})
        existing = channels.get(channel.connection)
        if existing is None:
            channels[channel.connection] = channel
        else:
            existing.last_update = time.monotonic()

    def find_producer(self, client_id: str) -> ClientChannel | None:
        """The connection of a client that heartbeats as a producer (of any group), by client id."""
        for channels in self.producers.values():
            for channel in channels.values():
                if channel.client_id == client_id:
                    return channel
        return None

    def unregister(self, connection: Connection, *, consumer_group: str | None = None,
                   producer_group: str | None = None, reason: str = "unregistered") -> None:
        groups = [consumer_group] if consumer_group else list(self.groups)
        for name in groups:
            info = self.groups.get(name)
            if info and info.channels.pop(connection, None) is not None:
                log.info("consumer left group %s (%s)", name, reason)
                if not info.channels:
                    del self.groups[name]
                if self.on_group_changed:
                    self.on_group_changed(info)
        for name in ([producer_group] if producer_group else list(self.producers)):
            channels = self.producers.get(name)
            if channels is not None:
                channels.pop(connection, None)
                if not channels:
                    del self.producers[name]

    def connection_closed(self, connection: Connection) -> None:
        self.unregister(connection, reason="connection closed")

    def expire(self, max_idle_seconds: float) -> None:
        deadline = time.monotonic() - max_idle_seconds
        stale = {ch.connection for info in self.groups.values() for ch in info.channels.values() if ch.last_update < deadline}
        stale |= {ch.connection for chans in self.producers.values() for ch in chans.values() if ch.last_update < deadline}
        for conn in stale:
            self.unregister(conn, reason="heartbeat expired")

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None
