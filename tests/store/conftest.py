from __future__ import annotations

import pytest
from store_helpers import STORE_HOST, small_config

from ferrymq.store import MessageStore


@pytest.fixture
def open_store(tmp_path):
    """open_store(**config overrides) -> a loaded MessageStore under tmp_path/store; shut down at the end."""
    opened: list[MessageStore] = []

    def factory(root=None, **overrides) -> MessageStore:
        store = MessageStore(small_config(root or tmp_path / "store", **overrides), store_host=STORE_HOST)
        store.load()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.shutdown()
