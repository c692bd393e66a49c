"""The JVM reader (format ``ferrymq-jvm``, spark-jobs/jvm) through ``ferrymq_spark.jvm_reader``:
the same plan gives exactly the rows of the Python source (format ``ferrymq``), against a real
broker process, and record by record against the Python decoder on pull bodies a stand-in broker
serves (IPv6 hosts, odd properties, compressed bodies)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
import zlib

import pytest
from py4j.protocol import Py4JJavaError  # a task's failure in the JVM reaches Python as this

from ferrymq.acl.signature import Credentials, signature_matches
from ferrymq.client.producer import Producer
from ferrymq.common.message import MessageExt, Prop, SysFlag, encode_properties, encode_record
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.request_headers import SendMessageHeader
from ferrymq.remoting.server import RemotingServer
from ferrymq_spark import DataLossError
from ferrymq_spark.jvm_reader import JvmReaderUnavailable, read_batch, read_plan
from ferrymq_spark.options import parse_options
from ferrymq_spark.planning import BatchPlan, open_client, plan_with
from ferrymq_spark.rows import SCHEMA, BatchBuilder

from testkit.spark import create_topic, produce
from tests.spark.test_data_loss import _bounds, trimmed_broker  # noqa: F401  (a fixture)
from tests.spark.test_record_columns import record
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def by_queue_offset(df) -> list:
    return sorted(df.collect(), key=lambda r: (r.topic, r.brokerName, r.queueId, r.queueOffset))


async def send_raw(namesrv: str, topic: str, queue_id: int, body: bytes, properties: dict[str, str],
                   sys_flag: int = 0) -> str:
    """One SEND_MESSAGE_V2 exactly as given (no UNIQ_KEY added, the body as is); the offset msgId."""
    async with Producer("jvm-raw-sender", namesrv_addr=namesrv) as producer:
        addr = await producer.instance.find_broker_addr("broker-a", topic)
        header = SendMessageHeader("jvm-raw-sender", topic, queue_id, sys_flag=sys_flag,
                                   born_timestamp=int(time.time() * 1000), properties=encode_properties(properties))
        response = await producer.instance.invoke_broker(
            addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(), body))
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response.get_str("msgId")


@pytest.fixture(scope="module")
def mixed_topic(broker_process):
    """JvmMixed (4 queues): batches with keys, tags and a user property, and single messages
    with a compressed body, a body that claims compression but is not zlib, no UNIQ_KEY, no
    keys or tags, non-ASCII properties."""
    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "JvmMixed", 4))
    sent = asyncio.run(produce(namesrv, "JvmMixed", 3000, queues=4, batch=100, seed=31))
    original = b"compress me " * 400
    zlib_flag = SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
    special = {
        "compressed": asyncio.run(send_raw(namesrv, "JvmMixed", 1, zlib.compress(original), {"KEYS": "z"}, zlib_flag)),
        "not_zlib": asyncio.run(send_raw(namesrv, "JvmMixed", 2, b"not a zlib stream", {"TAGS": "bad"}, zlib_flag)),
        "bare": asyncio.run(send_raw(namesrv, "JvmMixed", 3, b"no uniq key", {"only": "this"})),
        "unicode": asyncio.run(send_raw(namesrv, "JvmMixed", 0, b"u", {"KEYS": "a b", "TAGS": "Ω", "shop": "ünïcode ✓",
                                                                          Prop.UNIQ_KEY: "0A0B0C"})),
    }
    return namesrv, sent, original, special


def test_the_same_rows_as_the_python_source(spark, mixed_topic):
    namesrv, sent, original, special = mixed_topic
    options = {"namesrv": namesrv, "subscribe": "JvmMixed"}
    jvm, python = read_batch(spark, options, "jvm"), read_batch(spark, options, "python")
    assert jvm.schema == SCHEMA == python.schema

    jvm_rows = by_queue_offset(jvm)
    assert len(jvm_rows) == len(sent) + len(special)
    assert jvm_rows == by_queue_offset(python)  # every column of every row

    by_id = {r.msgId: r for r in jvm_rows}
    assert bytes(by_id[special["compressed"]].body) == original
    assert bytes(by_id[special["not_zlib"]].body) == b"not a zlib stream"  # kept as stored
    bare = by_id[special["bare"]]  # no UNIQ_KEY: the offset msgId the broker answered the send with
    assert (bare.keys, bare.tags, bare.properties.get("only")) == (None, None, "this")
    assert by_id["0A0B0C"].properties["shop"] == "ünïcode ✓" and by_id["0A0B0C"].tags == "Ω"
    assert "MIN_OFFSET" not in by_id["0A0B0C"].properties
    assert {s.msg_id for s in sent} <= set(by_id)
    assert jvm.rdd.getNumPartitions() == 4  # one task per queue


def test_starting_and_ending_offsets_are_respected(spark, mixed_topic):
    namesrv, sent, _, _ = mixed_topic
    start = json.dumps({"JvmMixed": {"broker-a": {"0": 10, "1": -2, "2": 700}}})
    end = json.dumps({"JvmMixed": {"broker-a": {"0": 20, "1": 5, "2": 700}}})
    options = {"namesrv": namesrv, "subscribe": "JvmMixed", "startingOffsets": start, "endingOffsets": end}
    rows = by_queue_offset(read_batch(spark, options, "jvm"))
    high3 = 1 + max(s.queue_offset for s in sent if s.queue_id == 3) + 1  # + the bare message
    expected = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)] + [(3, o) for o in range(high3)]
    assert [(r.queueId, r.queueOffset) for r in rows] == expected
    assert rows == by_queue_offset(read_batch(spark, options, "python"))


def test_min_partitions_split_queues_without_duplicates(spark, broker_process):
    namesrv = broker_process.namesrv_addr
    asyncio.run(create_topic(namesrv, "JvmSplit", 2))
    sent = asyncio.run(produce(namesrv, "JvmSplit", 3000, queues=2, batch=100, seed=32))
    df = read_batch(spark, {"namesrv": namesrv, "subscribe": "JvmSplit", "minPartitions": "7",
                            "ferrymq.pullBatchSize": "64", "ferrymq.pullPipelineDepth": "3"}, "jvm")
    assert df.rdd.getNumPartitions() >= 7
    ids = [r.msgId for r in df.select("msgId").collect()]
    assert sorted(ids) == sorted(s.msg_id for s in sent)


def test_data_loss_fails_or_skips(spark, trimmed_broker):  # noqa: F811  (the fixture)
    namesrv = trimmed_broker.namesrv_addr
    bounds = asyncio.run(_bounds(namesrv, "SparkLoss", 2))
    options = {"namesrv": namesrv, "subscribe": "SparkLoss", "consumerGroup": "lossy", "startingOffsets": "group"}
    with pytest.raises(DataLossError, match="committed offset 5 is below the queue's minimum"):
        read_batch(spark, options, "jvm")  # on the driver, when planning

    # A plan made while the messages were there, read after retention removed them: the executors' check.
    keys = [("SparkLoss", "broker-a", q) for q in range(2)]
    for fail in (True, False):
        opts = parse_options({**options, "failOnDataLoss": str(fail).lower()})
        plan = BatchPlan(opts, {k: 0 for k in keys}, {k: bounds[k[2]][1] for k in keys})
        with open_client(opts) as client:
            df = read_plan(spark, plan, client, "jvm")
        if fail:  # whichever queue's task fails first
            removed = "|".join(rf"#{q}: offsets 0\.\.{low - 1} were removed from the queue \(its minimum is now {low}\)"
                               for q, (low, _) in bounds.items())
            with pytest.raises(Py4JJavaError,
                               match=rf"FerryMQ data loss: SparkLoss@broker-a({removed}); set failOnDataLoss"):
                df.collect()
        else:
            rows = df.select("queueId", "queueOffset").collect()
            expected = {(q, o) for q, (low, high) in bounds.items() for o in range(low, high)}
            assert len(rows) == len(expected) and {(r.queueId, r.queueOffset) for r in rows} == expected


def jvm_plan(ranges: list[dict], **settings) -> str:
    return json.dumps({"ranges": ranges, "failOnDataLoss": True, "consumerGroup": "jvm-test", "pullBatchSize": 1024,
                       "pullPipelineDepth": 8, "timeoutMillis": 3000, **settings})


def test_a_broker_that_refuses_connections_is_named(spark):
    from pyspark.errors import PySparkException

    addr = f"127.0.0.1:{free_port()}"
    plan = jvm_plan([{"topic": "T", "brokerName": "broker-x", "queueId": 0, "start": 0, "end": 10, "addr": addr}])
    with pytest.raises(Py4JJavaError, match=f"cannot connect to FerryMQ broker {addr}"):
        spark.read.format("ferrymq-jvm").option("plan", plan).load().collect()
    with pytest.raises(PySparkException, match="needs the option plan"):
        spark.read.format("ferrymq-jvm").load()


def test_tls_is_python_only(spark, mixed_topic, monkeypatch, caplog):
    namesrv = mixed_topic[0]
    monkeypatch.setenv("FERRYMQ_TLS", "true")
    options = {"namesrv": namesrv, "subscribe": "JvmMixed"}
    with pytest.raises(JvmReaderUnavailable, match="does not speak TLS"):
        read_batch(spark, options, "jvm")
    with caplog.at_level(logging.INFO, logger="ferrymq_spark.jvm_reader"):
        df = read_batch(spark, options, "auto")  # the Python source: planned in Spark's own Python process
    assert [r.getMessage() for r in caplog.records] == [
        "reading with the Python source (format ferrymq): it does not speak TLS, and the client config asks for "
        "TLS (FERRYMQ_TLS)"]
    assert "format: ferrymq," in df._jdf.queryExecution().logical().toString()
    with pytest.raises(ValueError, match="reader must be one of auto, jvm, python"):
        read_batch(spark, options, "scala")


ADMIN = Credentials("jvm-admin", "jvm-admin-secret")


@pytest.fixture
def acl_broker(tmp_path, monkeypatch):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(f"accounts:\n  - accessKey: {ADMIN.access_key}\n    secretKey: {ADMIN.secret_key}\n"
                        f"    admin: true\n")
    process = StandaloneProcess(tmp_path / "store", ["aclEnable=true", f"aclFile={acl_file}"]).start()
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", ADMIN.access_key)  # every client made from here signs
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", ADMIN.secret_key)
    try:
        yield process
    finally:
        process.stop()


def test_acl_credentials_sign_the_pulls(spark, acl_broker, monkeypatch):
    namesrv = acl_broker.namesrv_addr
    asyncio.run(create_topic(namesrv, "JvmAcl", 2))
    sent = asyncio.run(produce(namesrv, "JvmAcl", 500, queues=2, batch=50, seed=33))
    options = {"namesrv": namesrv, "subscribe": "JvmAcl"}
    assert sorted(r.msgId for r in read_batch(spark, options, "jvm").collect()) == sorted(s.msg_id for s in sent)

    opts = parse_options(options)
    with open_client(opts) as client:
        plan = plan_with(client, opts)
        monkeypatch.delenv("FERRYMQ_ACCESS_KEY")  # the reader's config has no credentials now
        df = read_plan(spark, plan, client, "jvm")
    with pytest.raises(Py4JJavaError, match=r"refused PULL_MESSAGE of JvmAcl@broker-a#\d at offset 0: code 1 "):
        df.collect()


# ------------------------------------------------------------------ a stand-in broker


class RecordServer:
    """Serves PULL_MESSAGE from a list of records (offset = index), at most ``cap`` per answer
    (as a broker's per-pull caps), checking each request's ACL signature when ``secret`` is given."""

    def __init__(self, records: list[bytes], cap: int, secret: str | None = None) -> None:
        self.records, self.cap, self.secret = records, cap, secret
        self.pulls: list[dict[str, str]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = RemotingServer("127.0.0.1", 0)
        self.server.register(RequestCode.PULL_MESSAGE, self.pull)
        self._call(self.server.start())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def pull(self, request: RemotingCommand, connection) -> RemotingCommand:
        self.pulls.append(dict(request.ext_fields))
        if self.secret is not None and not signature_matches(request, self.secret):
            return request.response(ResponseCode.SYSTEM_ERROR, remark="signature mismatch")
        offset, n = request.get_long("queueOffset"), min(request.get_int("maxMsgNums"), self.cap)
        found = self.records[offset:offset + n]
        return request.response(ResponseCode.SUCCESS, remark="FOUND", body=b"".join(found), ext_fields={
            "suggestWhichBrokerId": 0, "nextBeginOffset": offset + len(found), "minOffset": 0,
            "maxOffset": len(self.records)})

    def close(self) -> None:
        self._call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def odd_records(start: int) -> list[bytes]:
    """Records the Python decoder has particular rules for."""
    rng = random.Random(41)
    compressed = {"body": zlib.compress(b"inflate me " * 300),
                  "sys_flag": SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB}
    lz4 = {"body": b"\x04\x22\x4d\x18 pretend", "sys_flag": SysFlag.COMPRESSED | SysFlag.COMPRESSION_LZ4}
    out = [record(rng, start, **compressed), record(rng, start + 1, **lz4)]
    raw_props = [  # duplicates (last wins), a trailing 0x02, empty names/values, invalid UTF-8, a pull-only key
        b"KEYS\x01first\x02KEYS\x01last\x02TAGS\x01t\x02",
        b"\x01x\x02y\x01\x02\xff\xfe\x01v\x02MIN_OFFSET\x013\x02UNIQ_KEY\x01AB\x01CD\x02",
        b"",
    ]
    for i, props in enumerate(raw_props):
        m = MessageExt(topic="Ödd" if i == 2 else "Odd", body=b"x" * i, queue_id=3, queue_offset=start + 2 + i,
                       commit_log_offset=77 + i, born_timestamp=1_700_000_000_123, store_timestamp=1_700_000_000_456,
                       born_host=("fe80::1", 1), store_host=("2001:db8::7", 10911) if i else ("10.0.0.1", 10911))
        out.append(bytes(encode_record(m, encoded_properties=props)))
    return out


def python_rows(records: list[bytes], first: int, end: int) -> list[dict]:
    """What the Python source makes of these records (its decoder, ferrymq_spark.rows)."""
    builder = BatchBuilder("broker-z")
    builder.add_records(b"".join(records), first, end)
    rows = builder.flush().to_pylist()
    for row in rows:
        row["properties"] = dict(row["properties"])
        for name in ("bornTimestamp", "storeTimestamp"):
            row[name] = round(row[name].timestamp() * 1000)
    return rows


def test_record_by_record_as_the_python_decoder(spark):
    """Varied records (IPv4 and IPv6 hosts, topics and properties in UTF-8, empty bodies, UNIQ_KEY
    or not) and odd ones, served 7 per pull to a signing reader: the rows the Python decoder makes."""
    from pyspark.sql import functions as F

    rng = random.Random(40)
    records = [record(rng, offset) for offset in range(300)]
    records += odd_records(len(records))
    server = RecordServer(records, cap=7, secret="s3cret")
    try:
        first, end = 5, len(records)
        plan = jvm_plan([{"topic": "Orders", "brokerName": "broker-z", "queueId": 3, "start": first, "end": end,
                          "addr": server.addr}], pullBatchSize=50, pullPipelineDepth=4)
        df = (spark.read.format("ferrymq-jvm").option("plan", plan).option("accessKey", "ak")
              .option("secretKey", "s3cret").load()
              .withColumn("bornTimestamp", F.unix_millis("bornTimestamp"))
              .withColumn("storeTimestamp", F.unix_millis("storeTimestamp")))
        rows = [r.asDict() for r in df.collect()]
        for row in rows:
            row["body"] = bytes(row["body"])
        assert rows == python_rows(records, first, end)
        assert rows[-3]["keys"] == "last" and rows[-2]["msgId"] == "AB\x01CD"
        assert all(p["AccessKey"] == "ak" and p["sysFlag"] == "4" and p["suspendTimeoutMillis"] == "0"
                   for p in server.pulls)
    finally:
        server.close()
