"""The source's schema, and messages turned into Arrow record batches of that schema.

Spark checks that a batch's Arrow schema equals the one it derives from the Spark schema
(``to_arrow_schema(..., timezone="UTC")``), so the Arrow schema is derived the same way
rather than written out twice.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferrymq.common.message import Prop, SysFlag, inflate_body
from ferrymq.common.message_id import offset_msg_id, unpack_ip

from ferrymq_spark.record_columns import RecordColumns, decode_columns, properties_map

log = logging.getLogger(__name__)

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("brokerName", StringType(), False),
    StructField("queueId", IntegerType(), False),
    StructField("queueOffset", LongType(), False),
    StructField("msgId", StringType(), False),
    StructField("keys", StringType(), True),
    StructField("tags", StringType(), True),
    StructField("body", BinaryType(), False),
    StructField("properties", MapType(StringType(), StringType(), True), False),
    StructField("bornTimestamp", TimestampType(), False),
    StructField("storeTimestamp", TimestampType(), False),
])

# Added by the pull consumer to every message it returns; they describe the pull, not the
# message, and would make two reads of the same message differ.
_PULL_ONLY_PROPERTIES = (Prop.MIN_OFFSET, Prop.MAX_OFFSET)


def arrow_schema(schema: StructType = SCHEMA) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # Spark 4.0 / 4.1: no timezone argument; timestamps are UTC already
        return to_arrow_schema(schema)


class BatchBuilder:
    """Collects pulled records as the broker sent them; ``flush()`` decodes them all at once
    into one RecordBatch (``record_columns``: no Python object per message)."""

    def __init__(self, broker_name: str) -> None:
        self.broker_name = broker_name
        self.schema = arrow_schema()
        self._clear()

    def _clear(self) -> None:
        self.bodies: list[bytes] = []
        self.ranges: list[tuple[int, int]] = []  # per body: the queue offsets wanted from it
        self.count = 0  # rows collected

    def __len__(self) -> int:
        return self.count

    def add_records(self, records: bytes, first: int, end: int) -> None:
        """A raw pull body holding queue offsets from ``first`` on (queues are dense); its
        records below ``end`` become rows."""
        self.bodies.append(records)
        self.ranges.append((first, end))
        self.count += end - first

    def flush(self) -> pa.RecordBatch:
        f = self.schema.field
        cols = decode_columns(b"".join(self.bodies))
        body_starts = np.cumsum([0] + [len(b) for b in self.bodies[:-1]])
        which = np.searchsorted(body_starts, cols.start, side="right") - 1
        lo, hi = np.array(self.ranges, dtype=np.int64).reshape(-1, 2).T
        wanted = (cols.queue_offset >= lo[which]) & (cols.queue_offset < hi[which])
        if not wanted.all():
            cols = cols.take(np.flatnonzero(wanted))
        self._clear()
        n = len(cols)
        props = properties_map(cols.properties, f("properties").type, _PULL_ONLY_PROPERTIES)
        return pa.RecordBatch.from_arrays([
            cols.topic,
            pa.array([self.broker_name] * n, f("brokerName").type),
            pa.array(cols.queue_id, f("queueId").type),
            pa.array(cols.queue_offset, f("queueOffset").type),
            _msg_ids(cols, pc.map_lookup(props, Prop.UNIQ_KEY, "last")),
            pc.map_lookup(props, Prop.KEYS, "last"),
            pc.map_lookup(props, Prop.TAGS, "last"),
            _inflated(cols),
            props,
            _timestamps(cols.born_ts, f("bornTimestamp").type),
            _timestamps(cols.store_ts, f("storeTimestamp").type),
        ], schema=self.schema)


def _msg_ids(cols: RecordColumns, uniq: pa.Array) -> pa.Array:
    """What Java's getMsgId() returns: UNIQ_KEY, else the offset msgId (computed only for those rows)."""
    if uniq.null_count == 0:
        return uniq
    ids = uniq.to_pylist()
    for i, value in enumerate(ids):
        if value is None:
            ids[i] = offset_msg_id(unpack_ip(cols.store_ip[i]), int(cols.store_port[i]), int(cols.phys_offset[i]))
    return pa.array(ids, pa.string())


def _inflated(cols: RecordColumns) -> pa.Array:
    """Bodies as the producer wrote them: compressed ones (rare) are inflated row by row; one
    that cannot be is kept as stored (as the pull consumer hands it over), with an error logged."""
    compressed = np.flatnonzero(cols.sys_flag & SysFlag.COMPRESSED)
    if not len(compressed):
        return cols.body
    bodies = cols.body.to_pylist()
    for i in compressed.tolist():
        try:
            bodies[i] = inflate_body(bodies[i], int(cols.sys_flag[i]))
        except ValueError as e:
            log.error("message at queue offset %d: %s; read as stored", cols.queue_offset[i], e)
    return pa.array(bodies, pa.binary())


def _timestamps(millis: np.ndarray, ts_type: pa.DataType) -> pa.Array:
    return pa.array(millis * 1000).cast(ts_type)  # ms -> the schema's microseconds
