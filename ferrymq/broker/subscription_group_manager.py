"""Subscription groups (consumer groups' broker-side settings), persisted to subscriptionGroup.json."""

from __future__ import annotations

import logging
from pathlib import Path

from ferrymq.common.json_config_file import JsonConfigFile
from ferrymq.common import rocketmq_json
from ferrymq.common.protocol import DataVersion, SubscriptionGroupConfig

log = logging.getLogger(__name__)

BUILTIN_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                  "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")


class SubscriptionGroupManager:
    def __init__(self, config_dir: Path, *, auto_create: bool) -> None:
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self._file = JsonConfigFile(config_dir / "subscriptionGroup.json")
        self._dirty = False

    def load(self) -> None:
        for name in BUILTIN_GROUPS:
            self.table[name] = SubscriptionGroupConfig(group_name=name)
        data = self._file.load() or {}
        for name, raw in (data.get("subscriptionGroupTable") or {}).items():
            self.table[name] = SubscriptionGroupConfig.from_dict(raw)
        if "dataVersion" in data:
            self.data_version = DataVersion.from_dict(data["dataVersion"])

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when auto-creation is on, else None."""
        found = self.table.get(group)
        if found is None and self.auto_create:
            found = self.update(SubscriptionGroupConfig(group_name=group))
        return found

    def update(self, config: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        old = self.table.get(config.group_name)
        self.table[config.group_name] = config
        log.info("subscription group %s %s (consumeEnable=%s)", config.group_name,
                 "updated" if old else "created", config.consume_enable)
        self.data_version.next()
        self._dirty = True
        return config

    def disable_consume(self, group: str) -> bool:
        """Broker protection: stop the group's pulls (NO_PERMISSION) until an admin re-enables it."""
        config = self.table.get(group)
        if config is None or not config.consume_enable:
            return False
        config.consume_enable = False
        self.data_version.next()
        self._dirty = True
        return True

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version.next()
        self._dirty = True
        return True

    def render(self) -> str:
        return rocketmq_json.dumps({"dataVersion": self.data_version.to_dict(),
                                    "subscriptionGroupTable": {k: v.to_dict() for k, v in self.table.items()}}, indent=2)

    async def persist(self, *, force: bool = False) -> None:
        if not (self._dirty or force):
            return
        self._dirty = False
        await self._file.save(self.render)
