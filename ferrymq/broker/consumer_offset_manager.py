"""Committed consumer offsets per ``topic@group`` and queue, persisted to consumerOffset.json.

The file uses fastjson's form ``{"offsetTable":{"T@g":{0:12,1:7}}}`` (raw number keys) so
that tooling written for RocketMQ reads it. Offsets are persisted by the broker every
``flushConsumerOffsetInterval`` and at shutdown.
"""

from __future__ import annotations

from pathlib import Path

from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common import rocketmq_json

SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self.table: dict[str, dict[int, int]] = {}
        self._file = JsonConfigFile(config_dir / "consumerOffset.json")
        self._dirty = False

    def load(self) -> None:
        data = self._file.load() or {}
        for key, queues in (data.get("offsetTable") or {}).items():
            self.table[key] = {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}{SEPARATOR}{group}", {})[queue_id] = offset
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
        for key in [k for k in self.table if k.rsplit(SEPARATOR, 1)[1] == group]:
            del self.table[key]
        self._dirty = True

    def render(self) -> str:
        return rocketmq_json.dumps({"offsetTable": self.table}, indent=2)

    async def persist(self, *, force: bool = False) -> None:
        if not (self._dirty or force):
            return
        self._dirty = False
        await self._file.save(self.render)
