"""FerryMQ's storage engine: CommitLog, ConsumeQueues and the MessageStore facade.

Synchronous and thread-safe; knows nothing about the network. Its asyncio face, what the
broker's event loop uses, is ``asyncio_store.AsyncMessageStore`` (threads in ``loop_bridge``).
"""

from ferrymq.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import (
    AppendResult,
    GetResult,
    GetStatus,
    PutStatus,
    QueryMessageResult,
    StoreNotRunningError,
)

__all__ = [
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "AppendResult",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutStatus",
    "QueryMessageResult",
    "StoreConfig",
    "StoreNotRunningError",
]
