"""Config files persisted as RocketMQ does: JSON, written atomically, previous copy in ``.bak``.

Writes go ``<file>.tmp`` (fsynced) -> previous content copied to ``<file>.bak`` -> rename
over ``<file>``. A crash at any point leaves either the old or the new file whole, and
``.bak`` is read when the main file is missing or unreadable. Callers on the event loop
use :meth:`JsonConfigFile.save` (an ``asyncio.to_thread`` hop), never the blocking calls.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from ferrymq.common import rocketmq_json

log = logging.getLogger(__name__)


class JsonConfigFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    def load(self) -> Any | None:
        """The parsed content, from the file or else its ``.bak``; None when neither exists."""
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                return rocketmq_json.loads(text)
            except ValueError as e:
                log.warning("config file %s is unreadable (%s); trying its backup", candidate, e)
        return None

    def write_blocking(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            shutil.copyfile(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)

    async def save(self, render: Callable[[], str]) -> None:
        """Render on the loop (a consistent snapshot), write in a thread; saves never overlap."""
        async with self._lock:
            text = render()
            write = asyncio.ensure_future(asyncio.to_thread(self.write_blocking, text))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The thread cannot be stopped: hold the lock until it is done, so the
                # next save never races it on the .tmp file.
                await write
                raise
