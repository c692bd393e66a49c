"""The sink's rows: which columns a DataFrame written to FerryMQ may have, and a row as a message.

=============  ===================================  ===========================================
column         type                                 meaning
=============  ===================================  ===========================================
body           binary or string (required)          the message body (a string as UTF-8)
topic          string                               the topic (else the ``topic`` option's)
tags           string                               the message's tag
keys           string or array<string>              its keys (a string: space-separated)
properties     map<string,string>                   user properties
shardingKey    string                               rows with one key go to one queue, in order
queueId        int                                  this queue of the topic (else chosen)
=============  ===================================  ===========================================

Any other column is refused before a task runs: a column the sink would drop is data lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, MapType, StringType, StructType

from ferrymq.common.java_hash import java_string_hash
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue

from ferrymq_spark.options import OptionsError

_STRING = StringType()
COLUMNS: dict[str, tuple[DataType, ...]] = {
    "body": (BinaryType(), _STRING),
    "topic": (_STRING,),
    "tags": (_STRING,),
    "keys": (_STRING, ArrayType(_STRING)),
    "properties": (MapType(_STRING, _STRING),),
    "shardingKey": (_STRING,),
    "queueId": (IntegerType(),),
}


def check_schema(schema: StructType, default_topic: str | None) -> None:
    """OptionsError naming the first column the sink cannot write."""
    names = {f.name: f for f in schema.fields}
    if "body" not in names:
        raise OptionsError(f"the DataFrame has no column body (columns: {', '.join(names)})")
    if "topic" not in names and default_topic is None:
        raise OptionsError("no topic: give the option topic or a column topic")
    if "shardingKey" in names and "queueId" in names:
        raise OptionsError("columns shardingKey and queueId both choose the queue: keep one")
    for name, f in names.items():
        allowed = COLUMNS.get(name)
        if allowed is None:
            raise OptionsError(f"column {name!r} is not written by the ferrymq sink "
                               f"(columns: {', '.join(COLUMNS)}); drop it or put it into properties")
        if not any(_same_type(f.dataType, t) for t in allowed):
            raise OptionsError(f"column {name}: type {f.dataType.simpleString()} is not "
                               f"{' or '.join(t.simpleString() for t in allowed)}")


def _same_type(actual: DataType, wanted: DataType) -> bool:
    # Nullability of elements and values does not matter: a null is refused row by row.
    return actual.simpleString() == wanted.simpleString()


@dataclass(frozen=True)
class OutgoingRow:
    message: Message
    sharding_key: str | None
    queue_id: int | None

    @property
    def chooses_queue(self) -> bool:
        return self.sharding_key is not None or self.queue_id is not None


def outgoing(row, default_topic: str | None) -> OutgoingRow:
    """A Spark Row (or any mapping of the columns) as the message it writes; ValueError for a
    value the message cannot carry (a null body or topic)."""
    values = row.asDict() if hasattr(row, "asDict") else dict(row)
    body = values.get("body")
    if body is None:
        raise ValueError("a row with a null body")
    topic = values.get("topic") or default_topic
    if not topic:
        raise ValueError("a row with a null topic and no option topic")
    msg = Message(topic, body.encode() if isinstance(body, str) else bytes(body))
    for name, value in (values.get("properties") or {}).items():
        if value is not None:
            msg.properties[name] = value
    if values.get("tags"):
        msg.tags = values["tags"]
    if values.get("keys"):
        msg.keys = values["keys"]
    return OutgoingRow(msg, values.get("shardingKey"), values.get("queueId"))


def queue_for(row: OutgoingRow, queues: list[MessageQueue]) -> MessageQueue | None:
    """The queue a row must go to (None: any). A sharding key picks one by its hash, as
    RocketMQ's SelectMessageQueueByHash does, over the topic's queues in a fixed order."""
    if row.queue_id is not None:
        chosen = [q for q in queues if q.queue_id == row.queue_id]
        if not chosen:
            raise ValueError(f"topic {row.message.topic} has no writable queue {row.queue_id}")
        return chosen[0]
    if row.sharding_key is not None:
        ordered = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
        return ordered[abs(java_string_hash(row.sharding_key)) % len(ordered)]
    return None
