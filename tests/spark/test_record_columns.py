"""The Spark source's bulk decoder against the record codec: the same pull bodies give the same
rows whether each record is decoded into a message (the codec every consumer uses) or all of
them are gathered column by column (``record_columns``, what the executors run).
No SparkSession: pyarrow and the source's schema only."""

from __future__ import annotations

import random
import zlib

import pytest

from ferrymq.common.message import (
    MessageExt,
    Prop,
    SysFlag,
    decode_properties,
    decode_records,
    encode_record,
    inflate_in_place,
)
from ferrymq_spark.rows import BatchBuilder


def record(rng: random.Random, offset: int, **overrides) -> bytes:
    body = rng.randbytes(rng.choice([0, 1, 12, 13, 700, 4096]))
    props = {Prop.KEYS: f"k{offset}", Prop.TAGS: rng.choice(["TagA", "TagB", "Ω-tag"]), "shop": "ünïcode ✓"}
    if rng.random() < 0.7:
        props[Prop.UNIQ_KEY] = f"{offset:032X}"
    fields = dict(topic=rng.choice(["Orders", "Zahlungen-ß"]), body=body, properties=props, queue_id=3,
                  queue_offset=offset, commit_log_offset=1000 + offset * 5000, born_timestamp=1_700_000_000_000 + offset,
                  store_timestamp=1_700_000_000_500 + offset, reconsume_times=offset % 3,
                  born_host=rng.choice([("10.1.2.3", 40000), ("fe80::1", 40001)]),
                  store_host=rng.choice([("10.9.8.7", 10911), ("2001:db8::7", 10911)]))
    fields.update(overrides)
    return bytes(encode_record(MessageExt(**fields)))


def expected_rows(bodies: list[tuple[bytes, int, int]], broker: str) -> list[dict]:
    """Rows as the source built them from decoded messages (before the bulk decoder)."""
    rows = []
    for body, first, end in bodies:
        for m in decode_records(body):
            if not first <= m.queue_offset < end:
                continue
            inflate_in_place(m)
            rows.append({
                "topic": m.topic, "brokerName": broker, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                "msgId": m.client_msg_id, "keys": m.properties.get(Prop.KEYS), "tags": m.properties.get(Prop.TAGS),
                "body": m.body, "properties": sorted(m.properties.items()),
                "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
            })
    return rows


def built_rows(bodies: list[tuple[bytes, int, int]], broker: str) -> list[dict]:
    builder = BatchBuilder(broker)
    for body, first, end in bodies:
        builder.add_records(body, first, end)
    rows = builder.flush().to_pylist()
    for row in rows:
        row["properties"] = sorted(row["properties"])
        row["bornTimestamp"] = int(row["bornTimestamp"].timestamp() * 1000)
        row["storeTimestamp"] = int(row["storeTimestamp"].timestamp() * 1000)
    return rows


def test_bulk_decoding_equals_the_record_codec_on_varied_records():
    rng = random.Random(11)
    bodies, offset = [], 0
    for _ in range(20):  # pull bodies of 1..32 records, as a queue reader collects them
        n = rng.randint(1, 32)
        body = b"".join(record(rng, offset + i) for i in range(n))
        bodies.append((body, offset, offset + n - rng.choice([0, 0, 1])))  # sometimes the range ends early
        offset += n
    assert built_rows(bodies, "broker-a") == expected_rows(bodies, "broker-a")


def test_compressed_bodies_come_out_as_the_producer_wrote_them():
    rng = random.Random(3)
    original = b"compress me " * 200
    packed = record(rng, 0, body=zlib.compress(original), sys_flag=SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB)
    plain = record(rng, 1)
    rows = built_rows([(packed + plain, 0, 2)], "b")
    assert rows[0]["body"] == original
    assert rows == expected_rows([(packed + plain, 0, 2)], "b")


def test_properties_are_parsed_as_the_codec_parses_them():
    """Empty names or values dropped, 4.9.0's trailing separator accepted, invalid UTF-8 replaced."""
    rng = random.Random(5)
    body = bytearray(record(rng, 0, properties={"a": "1", "KEYS": "k"}))
    # rewrite the properties field in place: same length, odd contents
    raw_props = "a\x011\x02KEYS\x01k".encode()
    odd = b"a\x011\x02\x01x\x02\xff\x01k\x02"[: len(raw_props)].ljust(len(raw_props), b"\x02")
    body[-len(raw_props):] = odd
    rows = built_rows([(bytes(body), 0, 1)], "b")
    codec = decode_properties(str(odd, "utf-8", "replace"))
    assert dict(rows[0]["properties"]) == codec
    assert rows == expected_rows([(bytes(body), 0, 1)], "b")


def test_malformed_bodies_are_refused_with_the_codecs_error():
    rng = random.Random(9)
    good = record(rng, 0)
    for bad in (good[:-5], good[:4] + b"\x00\x00\x00\x00" + good[8:]):
        builder = BatchBuilder("b")
        builder.add_records(bad, 0, 1)
        with pytest.raises(ValueError):
            builder.flush()


async def test_a_raw_pull_with_a_tag_filter_is_refused():
    """Tags are finished by the client, so a raw pull (records handed over undecoded) could
    return messages of other tags: the client refuses it instead."""
    from ferrymq.client.errors import MQClientError
    from ferrymq.client.pull_consumer import PullConsumer
    from ferrymq.common.protocol import MessageQueue

    consumer = PullConsumer("raw-group")
    with pytest.raises(MQClientError, match="raw pull"):
        await consumer.pull(MessageQueue("Orders", "broker-a", 0), 0, expression="TagA", raw=True)
