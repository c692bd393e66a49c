"""Where the controller keeps its state (each broker group's ``Group.to_dict()``, rendered as one
JSON document by the controller): the seam between the controller and its persistence.

A store holds one text document. ``load()`` reads it (None when there is none yet); ``save(text)``
replaces it, durably, before returning: the controller tells no broker of a change before that.
Two implementations:

- ``FileStateStore`` (default, outside Kubernetes): one file, written to a temporary file,
  fsynced, renamed over the old one and the directory fsynced, so a crash leaves the old or the
  new document, never a torn one. One controller process owns it.
- ``ferrymq.controller.kube_store.ConfigMapStateStore``: a ConfigMap written by compare-and-swap
  on its resourceVersion, for several controller replicas of which the Lease holder writes.

A save that may not have happened raises ``StateStoreError``; one that certainly did not because
another writer changed the document first raises ``StateConflict``. Either way the caller's
in-memory state may differ from the stored one; a replicated controller drops it and reads the
store again, the single controller undoes the change it tried (see Controller).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Protocol


class StateStoreError(Exception):
    """A save or load failed; after a failed save the stored document is the old or the new one."""


class StateConflict(StateStoreError):
    """Another writer changed the stored document since this one read it: nothing was written."""


class StateStore(Protocol):
    description: str  # where the state lives, for logs and errors

    async def load(self) -> str | None: ...

    async def save(self, data: str) -> None: ...


class FileStateStore:
    """The state in one local file, replaced atomically and fsynced (a single controller)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.description = str(self.path)

    async def load(self) -> str | None:
        try:
            return await asyncio.to_thread(self.path.read_text)
        except FileNotFoundError:
            return None

    async def save(self, data: str) -> None:
        try:
            await asyncio.to_thread(write_durably, self.path, data)
        except OSError as exc:  # disk full, EIO, read-only: the old document stays
            raise StateStoreError(f"cannot write {self.description}: {exc}") from None


def write_durably(path: Path, data: str) -> None:
    """Temporary file, fsync, rename over ``path``, fsync the directory (blocking). A write
    that fails before the rename leaves ``path`` as it was and removes the temporary file (on a
    full disk it holds the space the next attempt needs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
