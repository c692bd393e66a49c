"""The source's schema, and messages turned into Arrow record batches of that schema.

Spark checks that a batch's Arrow schema equals the one it derives from the Spark schema
(``to_arrow_schema(..., timezone="UTC")``), so the Arrow schema is derived the same way
rather than written out twice.
"""

from __future__ import annotations

import pyarrow as pa
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

from ferrymq.common.message import MessageExt, Prop

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
    """Accumulates messages column by column; ``flush()`` returns one RecordBatch."""

    def __init__(self, broker_name: str) -> None:
        self.broker_name = broker_name
        self.schema = arrow_schema()
        self._clear()

    def _clear(self) -> None:
        self.topic: list[str] = []
        self.queue_id: list[int] = []
        self.queue_offset: list[int] = []
        self.msg_id: list[str] = []
        self.keys: list[str | None] = []
        self.tags: list[str | None] = []
        self.body: list[bytes] = []
        self.properties: list[list[tuple[str, str]]] = []
        self.born: list[int] = []
        self.stored: list[int] = []

    def __len__(self) -> int:
        return len(self.queue_offset)

    def add(self, m: MessageExt) -> None:
        props = m.properties
        self.topic.append(m.topic)
        self.queue_id.append(m.queue_id)
        self.queue_offset.append(m.queue_offset)
        self.msg_id.append(m.client_msg_id)
        self.keys.append(props.get(Prop.KEYS))
        self.tags.append(props.get(Prop.TAGS))
        self.body.append(bytes(m.body))
        self.properties.append([(k, v) for k, v in props.items() if k not in _PULL_ONLY_PROPERTIES])
        self.born.append(m.born_timestamp * 1000)  # ms -> the schema's microseconds
        self.stored.append(m.store_timestamp * 1000)

    def flush(self) -> pa.RecordBatch:
        f = self.schema.field
        columns = [
            pa.array(self.topic, f("topic").type),
            pa.array([self.broker_name] * len(self), f("brokerName").type),
            pa.array(self.queue_id, f("queueId").type),
            pa.array(self.queue_offset, f("queueOffset").type),
            pa.array(self.msg_id, f("msgId").type),
            pa.array(self.keys, f("keys").type),
            pa.array(self.tags, f("tags").type),
            pa.array(self.body, f("body").type),
            pa.array(self.properties, f("properties").type),
            pa.array(self.born, f("bornTimestamp").type),
            pa.array(self.stored, f("storeTimestamp").type),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
