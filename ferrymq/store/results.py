"""What the store's calls answer: put statuses and results, pull (get) statuses and results,
query results (RocketMQ's PutMessageStatus / AppendMessageResult, GetMessageStatus /
GetMessageResult, QueryMessageResult)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
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
    # controller mode: the in-sync set is smaller than minInSyncReplicas (nothing stored)
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
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


class JoinedRecords(Sequence[bytes]):
    """Records read back to back into one buffer (``data``, a pull's body as it leaves), each
    sliced out only when asked for on its own."""

    __slots__ = ("data", "_sizes", "_bounds")

    def __init__(self, data: bytes, sizes: Sequence[int]) -> None:
        if sum(sizes) != len(data):
            raise ValueError(f"{len(sizes)} records of {sum(sizes)} bytes in all, but {len(data)} bytes given")
        self.data = data
        self._sizes = sizes
        self._bounds: list[tuple[int, int]] | None = None  # (start, end) of each, made when first asked

    def _record_bounds(self) -> list[tuple[int, int]]:
        if self._bounds is None:
            ends = list(itertools.accumulate(self._sizes))
            self._bounds = [(end - size, end) for end, size in zip(ends, self._sizes)]
        return self._bounds

    def __len__(self) -> int:
        return len(self._sizes)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.data[a:b] for a, b in self._record_bounds()[i]]
        a, b = self._record_bounds()[i]
        return self.data[a:b]

    def __iter__(self) -> Iterator[bytes]:
        data = self.data
        return (data[a:b] for a, b in self._record_bounds())

    def __eq__(self, other: object) -> bool:  # equal to a list of the same records
        if isinstance(other, JoinedRecords):
            return self.data == other.data and list(self._sizes) == list(other._sizes)
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"JoinedRecords({len(self._sizes)} records, {len(self.data)} bytes)"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: Sequence[bytes] = field(default_factory=list)  # raw records (a list, or JoinedRecords); body() joins them
    suggest_pull_from_slave: bool = False
    first_store_timestamp: int = 0  # of records[0], 0 when none
    fall_behind_bytes: int = 0  # CommitLog max offset - last scanned record (consumer lag in bytes)

    @property
    def message_count(self) -> int:
        return len(self.records)

    @property
    def buffer_total_size(self) -> int:
        records = self.records
        return len(records.data) if isinstance(records, JoinedRecords) else sum(map(len, records))

    def body(self) -> bytes:
        """The records back to back: a pull's body."""
        records = self.records
        return records.data if isinstance(records, JoinedRecords) else b"".join(records)


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

