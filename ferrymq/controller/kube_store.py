"""The controller's state in a ConfigMap, changed only by compare-and-swap (``--state
kubernetes``): the API server (etcd behind it) is the consensus engine, as for CloudNativePG.

The document is the ConfigMap's ``data["state.json"]``. ``load()`` reads it and remembers the
resourceVersion it was read at; ``save()`` replaces the ConfigMap only if it is still at that
version (creating it if it did not exist), and remembers the new version. A 409 means another
replica wrote since this one read: ``StateConflict``, and the caller must read again before it
writes anything (its picture is stale). A request without an answer raises ``StateStoreError``:
the write may or may not have landed, so the caller reads again too.

``may_write`` is asked right before each write: a controller passes its elector's ``is_leader``,
so a replica whose lease ran out while it was working never sends a write at all.
"""

from __future__ import annotations

from typing import Callable

from ferrymq.controller.state_store import StateConflict, StateStoreError
from ferrymq.kube.client import CONFIG_MAPS, Conflict, KubeClient, KubeError, NotFound

DATA_KEY = "state.json"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ferrymq-controller"}


class ConfigMapStateStore:
    def __init__(self, client: KubeClient, namespace: str, name: str, *,
                 may_write: Callable[[], bool] = lambda: True, timeout: float = 5.0) -> None:
        self.client = client
        self.namespace, self.name = namespace, name
        self.may_write = may_write
        self.timeout = timeout
        self.description = f"ConfigMap {namespace}/{name}"
        self._config_map: dict | None = None  # as last read or written; None: not read, or absent

    async def load(self) -> str | None:
        self._config_map = None
        try:
            cm = await self.client.get(CONFIG_MAPS, self.namespace, self.name, timeout=self.timeout)
        except NotFound:
            return None
        except KubeError as exc:
            raise StateStoreError(f"cannot read {self.description}: {exc}") from None
        self._config_map = cm
        return (cm.get("data") or {}).get(DATA_KEY)

    async def save(self, data: str) -> None:
        if not self.may_write():
            raise StateStoreError(f"not writing {self.description}: this replica does not lead")
        current = self._config_map
        try:
            if current is None:
                body = {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
                        "data": {DATA_KEY: data}}
                written = await self.client.create(CONFIG_MAPS, self.namespace, body, timeout=self.timeout)
            else:
                body = {**current, "data": {**(current.get("data") or {}), DATA_KEY: data}}
                written = await self.client.replace(CONFIG_MAPS, self.namespace, self.name, body,
                                                    timeout=self.timeout)
        except Conflict as exc:
            self._config_map = None
            raise StateConflict(f"{self.description} was changed by another writer ({exc.reason})") from None
        except KubeError as exc:
            self._config_map = None  # unknown outcome: the next write needs a fresh read
            raise StateStoreError(f"cannot write {self.description}: {exc}") from None
        self._config_map = written

