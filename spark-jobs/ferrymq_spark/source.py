"""``FerryMQDataSource``: FerryMQ topics as a Spark 4 Python data source, format ``ferrymq``:
read (here) and written (the sink: sink.py).

Spark runs these classes in several processes: ``reader()`` / ``streamReader()`` and the
offset methods in planner processes on the driver, ``read()`` in Python workers on the
executors (the reader object is pickled there). So readers hold only plain options and
ranges; a client is opened where it is used, and the streaming reader's own client never
travels with it.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ferrymq_spark.blocking_client import BlockingConsumer
from ferrymq_spark.offsets import OffsetRange, Offsets, offsets_from_json, offsets_to_json, queue_label, rate_limit, \
    split_ranges
from ferrymq_spark.options import OptionsError, SourceOptions, parse_options
from ferrymq_spark.planning import QueueBounds, check_start, open_client, plan_with, resolve_start
from ferrymq_spark.queue_reader import data_loss, read_range
from ferrymq_spark.rows import SCHEMA
from ferrymq_spark.sink_options import parse_sink_options

try:  # Spark 4.2+: admission control (latestOffset(start, limit)) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # Spark 4.0 / 4.1: latestOffset() without arguments
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class FerryMQPartition(InputPartition):
    """One task's work: an offset range of one queue."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r.to_dict())
        self.range = r


def _read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, FerryMQPartition):  # Spark's placeholder when nothing is to be read
        return
    with open_client(opts) as client:
        yield from read_range(client, partition.range, opts.pull, opts.fail_on_data_loss)


class FerryMQDataSource(DataSource):
    """``spark.read``/``readStream.format("ferrymq")`` and ``df.write``/``writeStream.format("ferrymq")``."""

    @classmethod
    def name(cls) -> str:
        return "ferrymq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> "FerryMQBatchReader":
        return FerryMQBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> "FerryMQStreamReader":
        return FerryMQStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from ferrymq_spark.sink import FerryMQBatchWriter  # the sink's modules only where it is used
        _appends_only(overwrite)
        return FerryMQBatchWriter(parse_sink_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from ferrymq_spark.sink import FerryMQStreamWriter
        _appends_only(overwrite)
        return FerryMQStreamWriter(parse_sink_options(self.options, streaming=True), schema)


def _appends_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionsError('a topic cannot be overwritten, only appended to: use mode("append") '
                           '(outputMode "append" for a stream)')


class FerryMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        # Resolved here, on the driver, once: every task reads exactly the planned ranges.
        with open_client(opts) as client:
            self.planned = plan_with(client, opts).partitions()

    def partitions(self) -> list[InputPartition]:
        return [FerryMQPartition(r) for r in self.planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, partition)


class FerryMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client: BlockingConsumer | None = None
        self._last_end: Offsets | None = None  # for Spark < 4.2, whose latestOffset() gets no start
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._group_committed: Offsets | None = None

    def __getstate__(self) -> dict:
        return {"opts": self.opts, "_client": None, "_last_end": None, "_target": None, "_group_committed": None}

    def _connected(self) -> BlockingConsumer:
        if self._client is None:
            self._client = open_client(self.opts)
        return self._client

    def initialOffset(self) -> dict:
        client = self._connected()
        bounds = QueueBounds.fetch(client, self.opts.topics)
        start = check_start(resolve_start(client, self.opts, bounds), bounds, self.opts.fail_on_data_loss,
                            "starting")
        self._last_end = start  # Spark < 4.2: where the first latestOffset() starts counting
        return offsets_to_json(start)

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._connected().max_offsets(self._connected().queues(self.opts.topics))

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        client = self._connected()
        bounds = QueueBounds.fetch(client, self.opts.topics)
        if start is not None:
            begin = offsets_from_json(start, "start offset")
            # Spark asks for the next batch only after the previous one (ending at ``start``) is
            # in the sink and its commit log: commit it to the group now rather than wait for
            # commit(), which Spark calls only when a batch with new data follows.
            self._commit_to_group(begin)
            max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        elif self._last_end is not None:
            # Spark < 4.2 passes neither start nor limit. It asks again only once the batch up to
            # the offsets it last planned is in the sink (one batch in flight): start there.
            begin = self._last_end
            self._commit_to_group(begin)
            max_rows = self.opts.max_offsets_per_trigger
        else:
            # Spark < 4.2, first call after a restart from a checkpoint: its offsets are not
            # known here, so this one batch is not rate-limited.
            begin, max_rows = {}, None
        # New queues begin at their earliest message; removed messages are not counted as backlog.
        current = {k: max(begin.get(k, bounds.min[k]), bounds.min[k]) for k in bounds.keys}
        latest = {k: max(current[k], bounds.max[k]) for k in bounds.keys}
        if self._target is not None:
            latest = {k: min(v, max(current[k], self._target.get(k, current[k]))) for k, v in latest.items()}
        # Queues that left the route keep their offsets; the others move at most to latest.
        end = {**begin, **rate_limit(current, latest, max_rows)}
        self._last_end = end
        return offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = offsets_from_json(start, "start offset"), offsets_from_json(end, "end offset")
        self._last_end = stop  # the next batch starts here (also after a restart re-runs this one)
        moving = [k for k in stop if stop[k] > begin.get(k, -1)]
        if not moving:
            return []
        client = self._connected()
        mins = client.min_offsets(moving)
        ranges = []
        for key in moving:
            first = begin.get(key, mins[key])
            if first < mins[key]:
                data_loss(self.opts.fail_on_data_loss,
                          f"{queue_label(key)}: offset {first} is below the queue's minimum {mins[key]}; "
                          f"messages {first}..{mins[key] - 1} were removed by retention")
                first = mins[key]
            if stop[key] > first:
                ranges.append(OffsetRange(*key, first, stop[key]))
        return [FerryMQPartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Spark calls this once the micro-batch up to ``end`` is durably in the sink."""
        self._commit_to_group(offsets_from_json(end, "end offset"))

    def _commit_to_group(self, offsets: Offsets) -> None:
        if self.opts.commit_to_group and offsets != self._group_committed:
            self._connected().commit_offsets(offsets)
            self._group_committed = offsets

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
