"""Committed consumer offsets per ``topic@group`` and queue, persisted to consumerOffset.json.

The file uses fastjson's form ``{"dataVersion":{...},"offsetTable":{"T@g":{0:12,1:7}}}`` (raw
number keys) so that tooling written for RocketMQ reads it; GET_ALL_CONSUMER_OFFSET answers the
same text. The data version moves on whenever an offset changes; a slave takes its master's with
the table (RocketMQ 5's SlaveSynchronize needs it). Offsets are persisted by the broker every
``flushConsumerOffsetInterval`` and at shutdown.
"""

from __future__ import annotations

from pathlib import Path

from ferrymq.common.consumer_protocol import ConsumerOffsetSerializeWrapper
from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common.protocol import DataVersion

SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self.table: dict[str, dict[int, int]] = {}
        self.data_version = DataVersion()
        self._file = JsonConfigFile(config_dir / "consumerOffset.json")
        self._dirty = False

    def load(self) -> None:
        saved = ConsumerOffsetSerializeWrapper.from_dict(self._file.load() or {})
        self.table.update(saved.offset_table)
        if saved.data_version is not None:
            self.data_version = saved.data_version

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.table.setdefault(f"{topic}{SEPARATOR}{group}", {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.data_version.next()
        self._dirty = True

    def adopt(self, copied: ConsumerOffsetSerializeWrapper) -> None:
        """A slave's copy of its master's table: merged over this one (entries the master does not
        have stay), and the master's data version taken when it sent one."""
        self.table.update({key: dict(queues) for key, queues in copied.offset_table.items()})
        if copied.data_version is not None:
            self.data_version = DataVersion.from_dict(copied.data_version.to_dict())
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for that queue."""
        return self.table.get(f"{topic}{SEPARATOR}{group}", {}).get(queue_id, -1)

    def queues_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{SEPARATOR}{group}", {}))

    def topics_of_group(self, group: str) -> set[str]:
        return {k.rsplit(SEPARATOR, 1)[0] for k in self.table if k.rsplit(SEPARATOR, 1)[1] == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {k.rsplit(SEPARATOR, 1)[1] for k in self.table if k.rsplit(SEPARATOR, 1)[0] == topic}

    def remove_group(self, group: str) -> None:
        keys = [k for k in self.table if k.rsplit(SEPARATOR, 1)[1] == group]
        for key in keys:
            del self.table[key]
        if keys:
            self.data_version.next()
        self._dirty = True

    def render(self) -> str:
        return ConsumerOffsetSerializeWrapper(self.table, self.data_version).to_json(indent=2).decode()

    async def persist(self, *, force: bool = False) -> None:
        if not (self._dirty or force):
            return
        self._dirty = False
        await self._file.save(self.render)
