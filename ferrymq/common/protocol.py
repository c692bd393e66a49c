"""RocketMQ protocol bodies: topics, routes, heartbeats, subscriptions and friends.

Field names and defaults follow RocketMQ 4.9 (see docs/wire-format.md#request-headers-and-bodies). Each type is
a dataclass with fastjson-compatible JSON through :class:`JsonModel`.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from ferrymq.common.json_model import JsonModel

# Topic-name prefixes and built-in names.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DEFAULT_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5 timer messages wait here (docs/timers.md)
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
MASTER_ID = 0


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class Perm:
    """Topic/broker permission bits."""

    PRIORITY = 0x8
    READ = 0x4
    WRITE = 0x2
    INHERIT = 0x1
    READ_WRITE = READ | WRITE

    @staticmethod
    def readable(perm: int) -> bool:
        return bool(perm & Perm.READ)

    @staticmethod
    def writeable(perm: int) -> bool:
        return bool(perm & Perm.WRITE)

    @staticmethod
    def inherit(perm: int) -> bool:
        return bool(perm & Perm.INHERIT)

    @staticmethod
    def describe(perm: int) -> str:
        return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + ("X" if perm & Perm.INHERIT else "-")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class DataVersion(JsonModel):
    timestamp: int = field(default_factory=now_ms)
    counter: int = 0
    # RocketMQ 5: the master epoch of a broker in controller mode (0 otherwise); a name server
    # keeps a broker id's address against a registration of an older epoch (route_info.py).
    state_version: int = 0

    def next(self) -> None:
        self.timestamp = now_ms()
        self.counter += 1

    def same(self, other: "DataVersion | None") -> bool:
        return (other is not None and other.timestamp == self.timestamp and other.counter == self.counter
                and other.state_version == self.state_version)


_TIMER_CHECKPOINT = struct.Struct(">7q")


@dataclass
class TimerCheckpointBody:
    """GET_TIMER_CHECK_POINT's answer (docs/timers.md#slaves): Apache 5's 56-byte binary timer
    checkpoint, big-endian, not JSON. ``last_read_time_ms`` is the fired-up-to time;
    ``last_timer_log_flush_pos`` the synced TimerLog position; both queue offsets count the
    timer topic's records indexed (FerryMQ indexes every stored one); then the data version."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    data_version: DataVersion = field(default_factory=DataVersion)

    def encode(self) -> bytes:
        v = self.data_version
        return _TIMER_CHECKPOINT.pack(self.last_read_time_ms, self.last_timer_log_flush_pos,
                                      self.last_timer_queue_offset, self.master_timer_queue_offset,
                                      v.state_version, v.timestamp, v.counter)

    @classmethod
    def decode(cls, data: bytes) -> "TimerCheckpointBody":
        """Apache's older form (32 bytes, no data version) is read too; anything else is refused."""
        if len(data) == _TIMER_CHECKPOINT.size:
            values = _TIMER_CHECKPOINT.unpack(data)
        elif len(data) == 32:
            values = struct.unpack(">4q", data) + (0, 0, 0)
        else:
            raise ValueError(f"a timer checkpoint body is 56 (or 32) bytes, got {len(data)}")
        read_ms, flush_pos, queue_offset, master_offset, state_version, timestamp, counter = values
        return cls(read_ms, flush_pos, queue_offset, master_offset,
                   DataVersion(timestamp=timestamp, counter=counter, state_version=state_version))


@dataclass
class TopicConfig(JsonModel):
    topic_name: str = ""
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = Perm.READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def describe(self) -> str:
        """As Apache's TopicConfig.toString, which its brokers put in remarks."""
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={Perm.describe(self.perm)}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={'true' if self.order else 'false'}]")


@dataclass
class TopicConfigSerializeWrapper(JsonModel):
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass
class RegisterBrokerBody(JsonModel):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)


@dataclass(frozen=True, order=True)
class MessageQueue(JsonModel):
    """Sorted by (topic, brokerName, queueId), the order allocation strategies rely on."""

    topic: str = ""
    broker_name: str = ""
    queue_id: int = 0

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


@dataclass
class QueueData(JsonModel):
    broker_name: str = ""
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = Perm.READ_WRITE
    topic_sys_flag: int = 0


@dataclass
class BrokerData(JsonModel):
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        return self.master_addr() or next(iter(self.broker_addrs.values()), None)


@dataclass
class TopicRouteData(JsonModel):
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues whose broker has a master, in route order."""
        masters = {b.broker_name for b in self.broker_datas if b.master_addr()}
        queues = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if Perm.writeable(q.perm) and q.broker_name in masters:
                queues.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return queues

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        queues = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if Perm.readable(q.perm):
                queues.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return queues

    def broker_addr(self, broker_name: str) -> str | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b.master_addr()
        return None


@dataclass
class ClusterInfo(JsonModel):
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class TopicList(JsonModel):
    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None


@dataclass
class SubscriptionData(JsonModel):
    topic: str = ""
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = field(default_factory=now_ms)
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        return self.sub_string in ("*", "", None) or not self.code_set


@dataclass
class ConsumerData(JsonModel):
    group_name: str = ""
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass
class ProducerData(JsonModel):
    group_name: str = ""


@dataclass
class HeartbeatData(JsonModel):
    client_id: str = field(default="", metadata={"json": "clientID"})
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)


@dataclass
class ConsumerListBody(JsonModel):
    consumer_id_list: list[str] = field(default_factory=list)


@dataclass
class SubscriptionGroupConfig(JsonModel):
    group_name: str = ""
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False  # RocketMQ 5: a FIFO group (POP delivers a queue's messages in order)


@dataclass
class KVTable(JsonModel):
    table: dict[str, str] = field(default_factory=dict)
