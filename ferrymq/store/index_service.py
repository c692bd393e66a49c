"""The IndexFiles of a store (``index/<yyyyMMddHHmmssSSS>``): building, querying, recovery, retention.

Every record but a rolled-back transaction is indexed under ``topic#UNIQ_KEY`` and under
``topic#k`` for each space-separated KEYS value (docs/wire-format.md#indexfile), in CommitLog order, by
the writer thread inside the store's put lock. Queries read without a lock.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ferrymq.common import speedups
from ferrymq.common.message import MessageExt, Prop, SysFlag
from ferrymq.store.config import StoreConfig
from ferrymq.store.index_file import IndexFile

log = logging.getLogger(__name__)

_FILE_NAME = re.compile(r"^\d{17}$")
_CLOSE_GRACE_S = 30.0  # a deleted file's descriptor stays open this long for queries in flight


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def index_keys(topic: str, properties: dict[str, str]) -> list[str]:
    """The index keys of one record: its UNIQ_KEY, then each of its KEYS."""
    keys = []
    uniq = properties.get(Prop.UNIQ_KEY)
    if uniq:
        keys.append(build_key(topic, uniq))
    for k in properties.get(Prop.KEYS, "").split(" "):
        if k:
            keys.append(build_key(topic, k))
    return keys


def py_index_postings(topic: str, msgs: Sequence[MessageExt], sizes: Sequence[int], phys: int,
                      out: list[tuple[str, int]]) -> None:
    """Append the postings (key, CommitLog offset) of a run of contiguous records starting at
    ``phys``: every ``index_keys`` of each record but rolled-back transaction records. Their
    properties are a dict of str to str (the records were encoded from them)."""
    for m, size in zip(msgs, sizes):
        if SysFlag.transaction_type(m.sys_flag) != SysFlag.TRANSACTION_ROLLBACK_TYPE:
            out.extend((key, phys) for key in index_keys(topic, m.properties))
        phys += size


_native = speedups.load("ferrymq.common._message_codec")
index_postings = _native.index_postings if _native is not None else py_index_postings


class IndexService:
    def __init__(self, config: StoreConfig) -> None:
        self.directory = config.index_dir
        self.hash_slot_num = config.max_hash_slot_num
        self.index_num = config.max_index_num
        self.max_msgs_num_batch = config.max_msgs_num_batch
        self._files: list[IndexFile] = []  # replaced, never mutated: readers iterate a snapshot
        self._list_lock = threading.Lock()
        self._retired: list[tuple[float, IndexFile]] = []
        self.last_indexed_timestamp = 0  # store time of the newest record indexed (checkpoint)

    @property
    def files(self) -> list[IndexFile]:
        return self._files

    # ------------------------------------------------------------ lifecycle and recovery

    def load(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if _FILE_NAME.match(n))
        self._files = [IndexFile(os.path.join(self.directory, n), self.hash_slot_num, self.index_num) for n in names]
        if self._files and not self._files[-1].is_write_full:
            self._files[-1].prepare_for_writing()  # at load (a thread), not in the first put (the loop)

    def undo_unfinished(self) -> None:
        """After a crash: unlink entries a put had linked but not yet counted in its header."""
        for f in self._files:
            undone = f.recover_tail()
            if undone:
                log.warning("index file %s: unlinked %d entries written after its header (unclean exit)", f.name, undone)

    def truncate_beyond(self, commit_log_end: int, store_time_of: Callable[[int], int]) -> None:
        """Remove entries for records at or past ``commit_log_end`` (the recovered CommitLog's end)."""
        for f in reversed(list(self._files)):
            count = f.header.index_count
            if count <= 1 or f.read_entry(count - 1)[1] < commit_log_end:
                break
            lo, hi = 1, count  # first entry whose record is not in the CommitLog any more
            while lo < hi:
                mid = (lo + hi) // 2
                if f.read_entry(mid)[1] >= commit_log_end:
                    hi = mid
                else:
                    lo = mid + 1
            log.warning("index file %s: removing %d entries for records past the CommitLog end %d",
                        f.name, count - lo, commit_log_end)
            f.truncate_entries(lo, store_time_of)
            if f.header.index_count <= 1 and len(self._files) > 1:
                self._remove(f)
                f.destroy()
        last = self._files[-1] if self._files else None
        self.last_indexed_timestamp = last.header.end_timestamp if last else 0

    @property
    def indexed_end(self) -> int:
        """CommitLog offset of the newest indexed record, -1 when nothing is indexed."""
        for f in reversed(self._files):
            if f.header.index_count > 1:
                return f.header.end_phy_offset
        return -1

    def close(self) -> None:
        for f in self._files:
            f.close()
        for _, f in self._retired:
            f.destroy()
        self._retired = []

    # ------------------------------------------------------------ writing (under the store's put lock)

    def build_index(self, topic: str, sys_flag: int, properties: dict[str, str], phy_offset: int,
                    store_timestamp: int) -> None:
        """Index one record (recovery, a slave's replication)."""
        if SysFlag.transaction_type(sys_flag) != SysFlag.TRANSACTION_ROLLBACK_TYPE:
            self.add_postings([(key, phy_offset) for key in index_keys(topic, properties)], store_timestamp)

    def add_postings(self, postings: list[tuple[str, int]], store_timestamp: int) -> None:
        """Index the postings (key, CommitLog offset) of records stored together, in CommitLog
        order (``index_postings`` makes them); their entries go out with one write per file."""
        while postings:
            f = self._writable_file(store_timestamp)
            done = f.put(postings, store_timestamp)
            postings = postings[done:]
        self.last_indexed_timestamp = store_timestamp

    def _writable_file(self, now_ms: int) -> IndexFile:
        last = self._files[-1] if self._files else None
        if last is not None and not last.is_write_full:
            return last
        os.makedirs(self.directory, exist_ok=True)
        name = _file_name(time.time_ns() // 1_000_000)
        if last is not None and name <= last.name:
            name = f"{int(last.name) + 1:017d}"  # names must sort in creation order
        f = IndexFile(os.path.join(self.directory, name), self.hash_slot_num, self.index_num, create=True,
                      end_phy_offset=last.header.end_phy_offset if last else 0,
                      end_timestamp=last.header.end_timestamp if last else 0)
        with self._list_lock:
            self._files = [*self._files, f]
        return f

    # ------------------------------------------------------------ reading

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """RocketMQ's IndexService.queryOffset: newest file first, at most maxMsgsNumBatch."""
        result = QueryOffsetResult()
        max_num = min(max_num, self.max_msgs_num_batch)
        files = self._files
        full_key = build_key(topic, key)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                result.index_last_update_timestamp = f.header.end_timestamp
                result.index_last_update_phyoffset = f.header.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(result.phy_offsets, full_key, max_num, begin, end)
            if f.header.begin_timestamp < begin or len(result.phy_offsets) >= max_num:
                break
        return result

    # ------------------------------------------------------------ retention and flushing

    def delete_expired(self, commit_log_min: int) -> int:
        """Delete leading files (never the newest) whose newest record is gone from the CommitLog."""
        doomed = []
        for f in self._files[:-1]:
            if f.header.end_phy_offset >= commit_log_min:
                break
            doomed.append(f)
        now = time.monotonic()
        for f in doomed:
            self._remove(f)
            f.unlink()
            self._retired.append((now, f))
        keep = []
        for retired_at, f in self._retired:
            if now - retired_at > _CLOSE_GRACE_S:
                f.destroy()
            else:
                keep.append((retired_at, f))
        self._retired = keep
        return len(doomed)

    def _remove(self, f: IndexFile) -> None:
        with self._list_lock:
            self._files = [x for x in self._files if x is not f]

    def flush(self, *, durable: bool = True) -> None:
        """fsync (or with ``durable`` False only publish the headers of) files written since."""
        for f in self._files:
            if durable:
                f.flush()
            else:
                f.write_header()


def _file_name(ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ names index files."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"
