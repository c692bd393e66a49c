"""The one codec of SEND_MESSAGE(_V2) and PULL_MESSAGE headers, as RocketMQ's clients and
brokers write and read them."""

from __future__ import annotations

import pytest

from ferrymq.remoting.codes import RequestCode, SerializeType
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from ferrymq.remoting.errors import HeaderFieldError
from ferrymq.remoting.request_headers import (
    MAX_RECONSUME_TIMES_VERSION,
    PullMessageHeader,
    PullSysFlag,
    SendMessageHeader,
)


def over_the_wire(req: RemotingCommand) -> RemotingCommand:
    [decoded] = FrameDecoder().feed(encode_frame(req))
    return decoded


SEND = SendMessageHeader("pg", "Orders", 3, "TBW102", 8, sys_flag=0, born_timestamp=1_700_000_000_123, flag=7,
                         properties="TAGS\x01A\x02", reconsume_times=2, max_reconsume_times=5, batch=False,
                         broker_name="broker-a")


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_send_v2_uses_rocketmq_short_keys_and_reads_back_the_same(serialize_type):
    fields = SEND.to_fields(v2=True)
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, b"body", serialize_type=serialize_type)
    assert req.ext_fields == {"a": "pg", "b": "Orders", "c": "TBW102", "d": "8", "e": "3", "f": "0",
                              "g": "1700000000123", "h": "7", "i": "TAGS\x01A\x02", "j": "2", "k": "false",
                              "l": "5", "m": "false", "n": "broker-a"}
    received = over_the_wire(req)
    assert SendMessageHeader.from_request(received) == SEND
    assert received.ext_fields["b"] == "Orders"  # read, not rewritten in place


def test_send_v1_uses_the_long_names():
    req = over_the_wire(RemotingCommand.request(RequestCode.SEND_MESSAGE, SEND.to_fields(v2=False)))
    assert req.ext_fields["producerGroup"] == "pg" and req.ext_fields["defaultTopicQueueNums"] == "8"
    assert SendMessageHeader.from_request(req) == SEND


def test_absent_optional_fields_are_left_out_and_read_as_defaults():
    header = SendMessageHeader("pg", "T")
    fields = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields()).ext_fields
    assert "i" not in fields and "l" not in fields and "n" not in fields  # properties, maxReconsumeTimes, bname
    back = SendMessageHeader.from_request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"}))
    assert (back.topic, back.queue_id, back.properties, back.max_reconsume_times) == ("T", -1, "", None)


def test_max_reconsume_times_counts_only_from_clients_that_send_it_meaningfully():
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SEND.to_fields())
    req.version = MAX_RECONSUME_TIMES_VERSION - 1
    assert SendMessageHeader.from_request(req).max_reconsume_times is None
    req.version = MAX_RECONSUME_TIMES_VERSION
    assert SendMessageHeader.from_request(req).max_reconsume_times == 5


def test_a_missing_topic_or_a_malformed_number_is_a_header_error():
    with pytest.raises(HeaderFieldError, match=r"the custom field <b> is null \(topic\)"):
        SendMessageHeader.from_request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "pg"}))
    with pytest.raises(HeaderFieldError, match=r"not a valid number.*\(queueId\)"):
        SendMessageHeader.from_request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "e": "x"}))
    with pytest.raises(HeaderFieldError):
        PullMessageHeader.from_request(RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}))


def test_pull_sysflag_bits_are_rocketmq_s():
    assert [int(f) for f in (PullSysFlag.COMMIT_OFFSET, PullSysFlag.SUSPEND, PullSysFlag.SUBSCRIPTION,
                             PullSysFlag.CLASS_FILTER, PullSysFlag.LITE_PULL)] == [0x1, 0x2, 0x4, 0x8, 0x10]


def test_pull_header_round_trip_and_defaults():
    header = PullMessageHeader("cg", "Orders", 2, 100, 16, PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET, 90,
                               15_000, subscription="A || B", sub_version=42)
    req = over_the_wire(RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields()))
    assert req.ext_fields["sysFlag"] == "3" and req.ext_fields["subscription"] == "A || B"
    assert PullMessageHeader.from_request(req) == header
    bare = PullMessageHeader.from_request(RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "cg", "topic": "T", "queueId": 0, "queueOffset": 5}))
    assert (bare.max_msg_nums, bare.commit_offset, bare.suspend_timeout_millis, bare.expression_type) == \
        (32, -1, 15_000, "TAG")
