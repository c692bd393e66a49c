"""The broker's topic table: built-in topics, creation, auto-creation, persistence.

Persisted to ``config/topics.json`` as a TopicConfigSerializeWrapper. Every change bumps
the data version; the broker re-registers with the name servers when it changes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from ferrymq.broker.config import BrokerConfig
from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common.protocol import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    DataVersion,
    Perm,
    TopicConfig,
    TopicConfigSerializeWrapper,
)

log = logging.getLogger(__name__)

# Topics a producer may not send to (RocketMQ's TopicValidator "not allowed send" list).
FORBIDDEN_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
     SELF_TEST_TOPIC, OFFSET_MOVED_EVENT}
)


class TopicConfigManager:
    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        self.config = config
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.system_topics: set[str] = set()
        self._file = JsonConfigFile(config_dir / "topics.json")
        # Called (on the loop) after a change that name servers must learn about.
        self.on_change: Callable[[], None] | None = None

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        self._add_builtin_topics()
        data = self._file.load()
        if data:
            wrapper = TopicConfigSerializeWrapper.from_dict(data)
            self.table.update(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
        self.data_version.next()

    def _add_builtin_topics(self) -> None:
        c = self.config
        rw_inherit = Perm.READ_WRITE | Perm.INHERIT
        builtins = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(f"{c.broker_cluster_name}_REPLY_TOPIC", 1, 1),
        ]
        if c.auto_create_topic_enable:
            builtins.append(TopicConfig(DEFAULT_TOPIC, c.default_topic_queue_nums, c.default_topic_queue_nums, rw_inherit))
        if c.cluster_topic_enable:
            builtins.append(TopicConfig(c.broker_cluster_name, 16, 16, rw_inherit))
        if c.broker_topic_enable:
            builtins.append(TopicConfig(c.broker_name, 1, 1, rw_inherit))
        if c.trace_topic_enable:  # one queue, read-write, as Apache (docs/trace.md#the-trace-topic)
            builtins.append(TopicConfig(c.msg_trace_topic_name, 1, 1))
        for t in builtins:
            self.table[t.topic_name] = t
            self.system_topics.add(t.topic_name)
        self.system_topics.add(DEFAULT_TOPIC)

    # ------------------------------------------------------------------ queries

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self.system_topics or topic.lower().startswith("rmq_sys_")

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version)

    # ------------------------------------------------------------------ changes

    def update(self, topic_config: TopicConfig) -> TopicConfig:
        """Create or replace a topic; persisted and announced by :meth:`_changed`."""
        old = self.table.get(topic_config.topic_name)
        self.table[topic_config.topic_name] = topic_config
        log.info("topic %s %s: read=%d write=%d perm=%s", topic_config.topic_name,
                 "updated" if old else "created", topic_config.read_queue_nums,
                 topic_config.write_queue_nums, Perm.describe(topic_config.perm))
        self._changed()
        return topic_config

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        log.info("topic %s deleted", topic)
        self._changed()
        return True

    def create_in_send(self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from an inheritable default topic, as a send may ask."""
        existing = self.table.get(topic)
        if existing:
            return existing
        default = self.table.get(default_topic)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.update(TopicConfig(topic, 1, 1, Perm.READ_WRITE, topic_sys_flag=topic_sys_flag))
        if default is None or not Perm.inherit(default.perm) or not self.config.auto_create_topic_enable:
            return None
        queues = max(1, min(client_queue_nums, default.write_queue_nums))
        return self.update(TopicConfig(topic, queues, queues, default.perm & ~Perm.INHERIT, topic_sys_flag=topic_sys_flag))

    def ensure(self, topic: str, queue_nums: int, perm: int = Perm.READ_WRITE) -> TopicConfig:
        """Create a system-made topic (retry, DLQ) if missing."""
        existing = self.table.get(topic)
        if existing:
            return existing
        return self.update(TopicConfig(topic, queue_nums, queue_nums, perm))

    def announce(self) -> None:
        """Something name servers see in the registration changed outside this table (the
        broker's permission): a new data version, announced like a topic change."""
        self._changed()

    def _changed(self) -> None:
        self.data_version.next()
        if self.on_change:
            self.on_change()

    async def persist(self) -> None:
        await self._file.save(lambda: self.wrapper().to_json(indent=2).decode("utf-8"))
