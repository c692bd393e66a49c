"""The trace record decoder on bodies the official clients wrote (docs/trace.md#trace-records).

PUB and CONSUME are trace message bodies the RocketMQ 4.9.7 Java client (enableMsgTrace) wrote
to FerryMQ's RMQ_SYS_TRACE_TOPIC; its consume records come two contexts to a message.
"""

from __future__ import annotations

import dataclasses

import pytest

from ferrymq.common.trace_data import (
    CONTENT_SPLITOR,
    FIELD_SPLITOR,
    TraceDataError,
    TraceEvent,
    complete_consume_events,
    consume_attempts,
    decode_trace_data,
    encode_trace_data,
)

MSG_ID = "FD0000000000000000000000000000025C874E0E2F2A8EF9BCE10000"
REQUEST_ID = "FD0000000000000000000000000000025C874E0E2F2A8EF9BDE30002"
PUB = (b"Pub\x011795889931491\x01DefaultRegion\x01GCap_P\x01Cap\x01" + MSG_ID.encode() +
       b"\x01T\x01k-sync-0\x01127.0.0.1:47189\x0122\x0162\x010\x017F0000010000B8550000000000000000\x01true\x02")
CONSUME = (b"SubBefore\x011795889931747\x01DefaultRegion\x01GCap\x01" + REQUEST_ID.encode() + b"\x01" + MSG_ID.encode() +
           b"\x010\x01k-sync-0\x02SubAfter\x01" + REQUEST_ID.encode() + b"\x01" + MSG_ID.encode() +
           b"\x018\x01true\x01k-sync-0\x010\x011795889931754\x01GCap\x02")


def record(*fields: str) -> str:
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def test_publish_record():
    (pub,) = decode_trace_data(PUB)
    assert (pub.type, pub.type_name, pub.msg_id, pub.timestamp) == ("Pub", "publish", MSG_ID, 1795889931491)
    assert (pub.region_id, pub.group, pub.topic, pub.tags, pub.keys) == ("DefaultRegion", "GCap_P", "Cap", "T", "k-sync-0")
    assert (pub.store_host, pub.body_length, pub.cost_ms, pub.msg_type) == ("127.0.0.1:47189", 22, 62, "Normal")
    assert (pub.offset_msg_id, pub.success, pub.client_host) == ("7F0000010000B8550000000000000000", True, None)


def test_consume_records_two_to_a_message():
    before, after = decode_trace_data(CONSUME)
    assert (before.type, before.group, before.request_id, before.msg_id, before.retry_times, before.keys) == \
        ("SubBefore", "GCap", REQUEST_ID, MSG_ID, 0, "k-sync-0")
    assert before.timestamp == 1795889931747 and before.success is None and before.topic is None
    assert (after.type, after.request_id, after.msg_id, after.cost_ms, after.success, after.keys) == \
        ("SubAfter", REQUEST_ID, MSG_ID, 8, True, "k-sync-0")
    assert (after.context_code, after.timestamp, after.group) == (0, 1795889931754, "GCap")


def test_consume_records_take_topic_group_and_time_from_their_neighbours():
    """An older client's SubAfter has neither time nor group; no consume record has the topic."""
    old_after = record("SubAfter", REQUEST_ID, MSG_ID, "8", "false", "k-sync-0", "1")
    events = complete_consume_events(decode_trace_data(PUB) + decode_trace_data(CONSUME.split(b"\x02")[0] + b"\x02"
                                                                               + old_after.encode()))
    pub, before, after = events
    assert (before.topic, after.topic) == ("Cap", "Cap")
    assert (after.group, after.timestamp, after.success, after.context_code) == ("GCap", before.timestamp, False, 1)
    assert pub == decode_trace_data(PUB)[0]


def test_publish_record_lengths_of_older_and_newer_clients():
    head = ["Pub", "1", "R", "G", "T", MSG_ID, "null", "null", "h:1", "3", "4", "3"]
    (oldest,) = decode_trace_data(record(*head, "false"))
    assert (oldest.offset_msg_id, oldest.success, oldest.tags, oldest.keys, oldest.msg_type) == (None, False, None, None, "Delay")
    (newest,) = decode_trace_data(record(*head, "OFF", "true", "10.0.0.1"))
    assert (newest.offset_msg_id, newest.success, newest.client_host) == ("OFF", True, "10.0.0.1")


def test_end_transaction_record():
    (end,) = decode_trace_data(record("EndTransaction", "5", "R", "PG", "T", MSG_ID, "tag", "key", "h:1", "1",
                                      "tx-1", "COMMIT_MESSAGE", "true"))
    assert (end.type_name, end.group, end.topic, end.msg_type) == ("end transaction", "PG", "T", "Trans")
    assert (end.transaction_id, end.transaction_state, end.from_transaction_check) == ("tx-1", "COMMIT_MESSAGE", True)
    assert end.to_dict()["transactionState"] == "COMMIT_MESSAGE" and end.to_dict()["typeName"] == "end transaction"


def test_consume_records_pair_into_deliveries_by_group():
    """A SubBefore and the SubAfter of the same request are one delivery; a delivery whose
    SubAfter never arrived has no result."""
    lost = record("SubBefore", "1795889932000", "DefaultRegion", "Audit", "REQ-2", MSG_ID, "0", "k-sync-0")
    events = complete_consume_events(decode_trace_data(PUB + CONSUME + lost.encode()))
    first, second = consume_attempts(events)
    assert (first.group, first.request_id, first.timestamp, first.retry_times) == ("Audit", "REQ-2", 1795889932000, 0)
    assert (first.success, first.cost_ms, first.return_type) == (None, None, None)
    assert (second.group, second.request_id, second.timestamp) == ("GCap", REQUEST_ID, 1795889931747)
    assert (second.retry_times, second.cost_ms, second.success, second.return_type) == (0, 8, True, "SUCCESS")
    assert second.to_dict()["returnType"] == "SUCCESS" and second.to_dict()["retryTimes"] == 0


@pytest.mark.parametrize("body, error", [
    (record("Sub", "1"), "trace context #1: unknown trace type 'Sub'"),
    (record("SubBefore", "1", "R", "G"), "trace context #1: SubBefore record has 4 fields, at least 8 expected"),
    (PUB.decode() + record("SubAfter", "r", "m", "soon", "true", "k"), "trace context #2: costTime is not a number: 'soon'"),
    (record("SubAfter", "r", "m", "1", "yes", "k"), "success is not true/false: 'yes'"),
    (record("Pub", "1", "R", "G", "T", "m", "t", "k", "h", "1", "1", "9", "true"), "msgType ordinal 9"),
])
def test_records_not_in_the_format_are_refused_with_the_reason(body, error):
    with pytest.raises(TraceDataError, match=error):
        decode_trace_data(body)


def test_a_body_not_in_utf8_is_refused():
    with pytest.raises(TraceDataError, match="not UTF-8"):
        decode_trace_data(b"Pub\x01\xff")


def test_empty_body_holds_no_events():
    assert decode_trace_data(b"") == []


def test_encoded_records_read_back_as_the_clients_full_form():
    """encode_trace_data writes what the 4.9.7 client writes (its consume pair byte for byte)."""
    before, after = decode_trace_data(CONSUME)
    assert encode_trace_data([before, after]).encode() == CONSUME
    (pub,) = decode_trace_data(PUB)
    pub = dataclasses.replace(pub, client_host="127.0.0.1:5555")
    assert decode_trace_data(encode_trace_data([pub])) == [pub]
    end = TraceEvent("EndTransaction", MSG_ID, timestamp=1, region_id="DefaultRegion", group="g", topic="T",
                     store_host="127.0.0.1:10911", msg_type="Trans", transaction_id="tx",
                     transaction_state="COMMIT_MESSAGE", from_transaction_check=False)
    assert decode_trace_data(encode_trace_data([end])) == [end]
