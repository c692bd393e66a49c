"""What the store's calls answer: put statuses and results, pull (get) statuses and results,
query results (RocketMQ's PutMessageStatus / AppendMessageResult, GetMessageStatus /
GetMessageResult, QueryMessageResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # SYNC_MASTER: no slave confirmed it in time (stored)
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # SYNC_MASTER: no slave close enough to wait for (stored)
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


_STORED = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE)


@dataclass
class AppendResult:
    status: PutStatus
    wrote_offset: int = 0  # physical offset of the first record
    wrote_bytes: int = 0
    msg_ids: list[str] = field(default_factory=list)  # offset msgIds, one per message
    queue_offset: int = 0  # of the first message
    msg_num: int = 0
    store_timestamp: int = 0
    remark: str | None = None
    group_end: int = 0  # stored: the CommitLog end after the puts written with this one (put_group)

    @property
    def ok(self) -> bool:
        return self.status in _STORED  # stored, whatever the flush or replication wait said

    @property
    def msg_id(self) -> str:
        """What SendMessageResponseHeader.msgId carries: comma-joined for a batch."""
        return ",".join(self.msg_ids)


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)  # raw records; b"".join() is a pull body
    suggest_pull_from_slave: bool = False
    first_store_timestamp: int = 0  # of records[0], 0 when none
    fall_behind_bytes: int = 0  # CommitLog max offset - last scanned record (consumer lag in bytes)

    @property
    def message_count(self) -> int:
        return len(self.records)

    @property
    def buffer_total_size(self) -> int:
        return sum(map(len, self.records))

    def body(self) -> bytes:
        return b"".join(self.records)


@dataclass
class QueryMessageResult:
    """QUERY_MESSAGE: candidate records (hash matches; the client checks the keys)."""

    records: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class StoreNotRunningError(RuntimeError):
    pass


def refused(status: PutStatus, remark: str) -> AppendResult:
    """A put that stored nothing."""
    return AppendResult(status, remark=remark)

