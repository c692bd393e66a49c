"""The ACL file in force: loaded at start, re-read whenever it changes on disk.

RocketMQ watches ``plain_acl.yml`` the same way (a periodic check, 500 ms). A stat per
interval catches edits in place and Kubernetes' Secret updates alike (those swap a
symlink, so the inode changes). A file that no longer parses is reported and the
previous ACL stays in force: a typo must not open the broker up or lock everyone out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ferrymq.acl.plain_acl import AclConfig, AclConfigError, load_acl_file, parse_acl

log = logging.getLogger(__name__)

__all__ = ["AclFile", "default_acl_path"]


def default_acl_path() -> Path:
    """RocketMQ's place for it: ``$ROCKETMQ_HOME/conf/plain_acl.yml`` (else ./conf/)."""
    return Path(os.environ.get("ROCKETMQ_HOME", ".")) / "conf" / "plain_acl.yml"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class AclFile:
    def __init__(self, path: str | Path, *, check_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.check_interval = check_interval
        self._config: AclConfig | None = None
        self._stamp: tuple[int, int, int] | None = None
        self.reloads = 0  # successful loads after the first
        self.rejected = 0  # changes that did not parse (the previous ACL stayed)
        self._edit_lock = threading.Lock()
        self.loaded_at_ms = 0

    @property
    def config(self) -> AclConfig:
        if self._config is None:
            raise RuntimeError("ACL file not loaded")
        return self._config

    def load(self) -> AclConfig:
        """Blocking; raises AclConfigError (the broker refuses to start on it)."""
        stamp = _stamp(self.path)
        config = load_acl_file(self.path)
        self._config, self._stamp = config, stamp
        self.loaded_at_ms = int(time.time() * 1000)
        log.info("ACL loaded from %s: %d accounts, %d global white-list entries", self.path,
                 len(config.accounts), len(config.global_white_addresses))
        return config

    async def watch(self) -> None:
        """Reload on change until cancelled."""
        while True:
            await asyncio.sleep(self.check_interval)
            stamp = await asyncio.to_thread(_stamp, self.path)
            if stamp == self._stamp:
                continue
            if stamp is None:
                log.error("ACL file %s is gone; the ACL loaded before stays in force", self.path)
                self._stamp = None
                continue
            try:
                await asyncio.to_thread(self.load)
                self.reloads += 1
            except AclConfigError as exc:
                self._stamp = stamp  # report a broken file once, not every interval
                self.rejected += 1
                log.error("%s; the ACL loaded before stays in force", exc)

    def edit(self, change: Callable[[dict[str, Any]], None]) -> AclConfig:
        """Blocking: apply ``change`` to the file's YAML document, check the result, write it
        (atomically, so the watcher never sees half a file) and put it in force. Raises
        AclConfigError for a result that would not load, OSError when the file cannot be
        written (e.g. a read-only Secret mount: edit the Secret instead)."""
        import yaml

        with self._edit_lock:
            try:
                doc = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
            except FileNotFoundError:
                doc = {}
            except yaml.YAMLError as exc:
                raise AclConfigError(f"ACL file {self.path} is not valid YAML: {exc}") from None
            if not isinstance(doc, dict):
                raise AclConfigError(f"ACL file {self.path} is not a mapping")
            change(doc)
            parse_acl(doc)  # refuse before writing anything
            fd, tmp = tempfile.mkstemp(prefix=".plain_acl.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    yaml.safe_dump(doc, f, sort_keys=False)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            return self.load()
