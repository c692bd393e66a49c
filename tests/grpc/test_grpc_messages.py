"""Message conversion between the v2 protocol and the store: delivery times as timers, type checks,
digests, and the Python client's delivery time in milliseconds."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from ferrymq.common.message import MessageExt, Prop
from ferrymq.grpc.messages import (SHARDING_KEY, MessageRefused, incoming, message_type_of, outgoing, timestamp_ms,
                                   to_timestamp)
from ferrymq.grpc.protocol import Code, pb
from ferrymq.store.config import StoreConfig

CONFIG = StoreConfig(store_path_root_dir="unused")


def msg(**system) -> pb.Message:
    system.setdefault("message_id", "ID1")
    return pb.Message(topic=pb.Resource(name="T"), body=b"b", system_properties=pb.SystemProperties(**system))


def test_a_delivery_time_becomes_the_exact_timer_time_not_a_delay_level():
    now = 1_700_000_000_000
    for due in (now - 5000, now + 7000, now + 45 * 60_000, now + CONFIG.timer_max_delay_sec * 1000):
        out = outgoing(msg(delivery_timestamp=to_timestamp(due)), queue_id=-1, store_config=CONFIG, now_ms=now)
        props = out.properties
        assert props[Prop.TIMER_DELIVER_MS] == str(due)
        assert Prop.DELAY not in props
        assert out.message_type == pb.MessageType.DELAY


def test_a_delivery_time_beyond_the_timer_max_delay_is_refused_as_apaches_proxy_does():
    now = 1_700_000_000_000
    config = StoreConfig(store_path_root_dir="unused", timer_max_delay_sec=3600)
    with pytest.raises(MessageRefused) as refused:
        outgoing(msg(delivery_timestamp=to_timestamp(now + 3_600_001)), queue_id=-1, store_config=config, now_ms=now)
    assert refused.value.code == Code.ILLEGAL_DELIVERY_TIME
    assert refused.value.message == "the max delay time of message is too large, max is 3600000"


def test_python_clients_milliseconds_in_the_seconds_field_are_read_as_milliseconds():
    assert timestamp_ms(Timestamp(seconds=1_700_000_000)) == 1_700_000_000_000
    assert timestamp_ms(Timestamp(seconds=1_700_000_000_123)) == 1_700_000_000_123


def test_message_type_follows_what_the_message_carries():
    assert message_type_of(msg()) == pb.MessageType.NORMAL
    assert message_type_of(msg(message_group="g")) == pb.MessageType.FIFO
    assert message_type_of(msg(message_type=pb.MessageType.TRANSACTION)) == pb.MessageType.TRANSACTION
    for bad in (msg(message_group="g", message_type=pb.MessageType.NORMAL),
                msg(message_type=pb.MessageType.FIFO),
                msg(message_group="g", message_type=pb.MessageType.TRANSACTION)):
        with pytest.raises(MessageRefused) as refused:
            message_type_of(bad)
        assert refused.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_fifo_message_keeps_its_group_and_comes_back_as_fifo():
    out = outgoing(msg(message_group="orders-7", tag="T1", keys=["a", "b"]), queue_id=3, store_config=CONFIG)
    props = out.properties
    assert props[SHARDING_KEY] == "orders-7" and props[Prop.TAGS] == "T1" and props[Prop.KEYS] == "a b"
    assert props[Prop.UNIQ_KEY] == "ID1" and out.header.queue_id == 3
    stored = MessageExt(topic="T", body=b"b", properties=props, queue_id=3, queue_offset=9)
    back = incoming(stored, topic="T", receipt_handle="h", delivery_attempt=2, invisible_ms=5000)
    assert back.system_properties.message_group == "orders-7"
    assert back.system_properties.message_type == pb.MessageType.FIFO
    assert back.system_properties.message_id == "ID1" and list(back.system_properties.keys) == ["a", "b"]
    assert back.system_properties.delivery_attempt == 2 and back.system_properties.queue_offset == 9
    assert dict(back.user_properties) == {}


def test_a_retried_message_shows_its_original_topic():
    stored = MessageExt(topic="%RETRY%G", body=b"b", properties={Prop.RETRY_TOPIC: "Orders", "k": "v"})
    back = incoming(stored, topic="%RETRY%G", receipt_handle="h", delivery_attempt=3, invisible_ms=1000)
    assert back.topic.name == "Orders" and dict(back.user_properties) == {"k": "v"}


def test_user_properties_are_taken_as_sent_but_empty_values_and_control_characters():
    message = msg(tag="T")
    message.user_properties.update({"city": "Zürich", "empty": ""})
    out = outgoing(message, queue_id=-1, store_config=CONFIG)
    assert out.properties["city"] == "Zürich" and "empty" not in out.properties  # a record cannot carry ""
    for value in ("a\x85b", "line\nbreak", "\x7f"):  # C1, C0 and DEL: Java's isISOControl
        bad = msg()
        bad.user_properties["note"] = value
        with pytest.raises(MessageRefused) as refused:
            outgoing(bad, queue_id=-1, store_config=CONFIG)
        assert refused.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY and "control character" in refused.value.message
