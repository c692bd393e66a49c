"""Protocol bodies decode what RocketMQ's Java side sends and encode what it expects."""

import json
import struct

import pytest

from ferrymq.common.protocol import (
    BrokerData,
    DataVersion,
    HeartbeatData,
    MessageQueue,
    Perm,
    QueueData,
    SubscriptionGroupConfig,
    TimerCheckpointBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)

JAVA_ROUTE = ('{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
              '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
              '"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')

# The example heartbeat of docs/wire-format.md#heartbeat-body, as a Java 4.9 client sends it.
JAVA_HEARTBEAT = ('{"clientID":"10.0.0.5@1234#987","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
                  '"consumeType":"CONSUME_PASSIVELY","groupName":"g1","messageModel":"CLUSTERING",'
                  '"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG",'
                  '"subString":"TagA","subVersion":1690000000000,"tagsSet":["TagA"],"topic":"T1"}],"unitMode":false}],'
                  '"producerDataSet":[{"groupName":"p1"},{"groupName":"CLIENT_INNER_PRODUCER"}]}')


def test_java_route_data_decodes_and_gives_publish_and_subscribe_queues():
    route = TopicRouteData.from_json(JAVA_ROUTE)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.broker_addr("broker-a") == "10.0.0.1:10911"
    assert route.publish_queues("T") == [MessageQueue("T", "broker-a", i) for i in range(4)]
    assert route.subscribe_queues("T") == [MessageQueue("T", "broker-a", i) for i in range(4)]


def test_route_data_encodes_fastjson_form_by_default_and_quoted_keys_when_standard():
    route = TopicRouteData.from_json(JAVA_ROUTE)
    assert route.to_json().decode() == JAVA_ROUTE
    standard = json.loads(route.to_json(standard=True))
    assert standard["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}


def test_queues_of_a_broker_without_master_or_write_permission_are_not_for_publishing():
    route = TopicRouteData(
        queue_datas=[QueueData("a", 2, 2, Perm.READ), QueueData("b", 2, 2, Perm.READ_WRITE)],
        broker_datas=[BrokerData("c", "a", {0: "x:1"}), BrokerData("c", "b", {1: "y:1"})])
    assert route.publish_queues("T") == []
    assert [q.broker_name for q in route.subscribe_queues("T")] == ["a", "a", "b", "b"]


def test_java_heartbeat_decodes_with_clientID_and_subscriptions():
    hb = HeartbeatData.from_json(JAVA_HEARTBEAT)
    assert hb.client_id == "10.0.0.5@1234#987"
    sub = hb.consumer_data_set[0].subscription_data_set[0]
    assert (sub.topic, sub.sub_string, sub.code_set, sub.sub_version) == ("T1", "TagA", [2598919], 1690000000000)
    assert [p.group_name for p in hb.producer_data_set] == ["p1", "CLIENT_INNER_PRODUCER"]
    assert json.loads(hb.to_json()) == json.loads(JAVA_HEARTBEAT)


def test_topic_config_json_matches_rocketmq_field_names_and_defaults():
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 8, 8)})
    data = json.loads(wrapper.to_json())
    assert data["topicConfigTable"]["T"] == {"order": False, "perm": 6, "readQueueNums": 8,
                                             "topicFilterType": "SINGLE_TAG", "topicName": "T", "topicSysFlag": 0,
                                             "writeQueueNums": 8}
    # RocketMQ 5's DataVersion (4.9's has no stateVersion, and its name server ignores the field)
    assert set(data["dataVersion"]) == {"counter", "stateVersion", "timestamp"}


def test_subscription_group_defaults_follow_rocketmq_and_unknown_fields_are_ignored():
    group = SubscriptionGroupConfig.from_json('{"groupName":"g","consumeEnable":false,"someFutureField":1}')
    assert group.group_name == "g" and group.consume_enable is False
    assert (group.retry_queue_nums, group.retry_max_times, group.consume_broadcast_enable) == (1, 16, True)


def test_the_timer_checkpoint_body_reads_apaches_forms_and_refuses_others():
    body = TimerCheckpointBody(1_700_000_001_000, 480, 7, 7, DataVersion(timestamp=5, counter=2, state_version=3))
    data = body.encode()
    assert data == struct.pack(">7q", 1_700_000_001_000, 480, 7, 7, 3, 5, 2)  # Apache 5's layout
    back = TimerCheckpointBody.decode(data)
    assert (back.last_read_time_ms, back.master_timer_queue_offset, back.data_version.counter) == (
        1_700_000_001_000, 7, 2)
    older = TimerCheckpointBody.decode(data[:32])  # before Apache added the data version
    assert older.last_read_time_ms == 1_700_000_001_000 and older.data_version.counter == 0
    with pytest.raises(ValueError, match="56 \\(or 32\\) bytes, got 40"):
        TimerCheckpointBody.decode(data[:40])
