"""fastjson-compatible JSON: what Java peers write must parse, and what we write they must read."""

import pytest

from ferrymq.common import rocketmq_json
from ferrymq.common.rocketmq_json import ObjectKey


def test_number_keys_from_java_route_data_parse():
    text = '{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a"}'
    assert rocketmq_json.loads(text) == {"brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}, "brokerName": "broker-a"}


def test_object_keys_from_consume_stats_parse_and_compare_regardless_of_field_order():
    text = '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5,"consumerOffset":3}}}'
    table = rocketmq_json.loads(text)["offsetTable"]
    assert table[ObjectKey({"topic": "T", "queueId": 0, "brokerName": "b"})] == {"brokerOffset": 5, "consumerOffset": 3}


def test_fastjson_lenient_forms_parse():
    assert rocketmq_json.loads("{a:1,'b':'x',}") == {"a": 1, "b": "x"}
    assert rocketmq_json.loads("[1,2,]") == [1, 2]


def test_dumps_writes_raw_number_and_object_keys_alphabetically():
    data = {"z": 1, "offsetTable": {ObjectKey({"topic": "T", "queueId": 0, "brokerName": "b"}): {"x": 1}},
            "addrs": {1: "b", 0: "a"}}
    assert rocketmq_json.dumps(data) == (
        '{"addrs":{0:"a",1:"b"},"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"x":1}},"z":1}')


def test_round_trip_of_special_keys():
    data = {"t": {0: 12, 7: 3}, "u": "ü"}
    assert rocketmq_json.loads(rocketmq_json.dumps(data)) == data


def test_plain_json_uses_standard_form_and_keeps_unicode_raw():
    assert rocketmq_json.dumps({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


@pytest.mark.parametrize("bad", ["{", '{"a":}', "{1 2}", "[1,2", '{"a":1} x'])
def test_malformed_json_is_an_error(bad):
    with pytest.raises(ValueError):
        rocketmq_json.loads(bad)
