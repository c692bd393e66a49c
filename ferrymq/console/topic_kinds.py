"""Which kind a topic is: a group's retry or dead-letter topic, one the brokers keep for
themselves, or a normal (application) topic; the same for groups."""

from __future__ import annotations

from ferrymq.common.protocol import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TOOLS_CONSUMER_GROUP,
)

KINDS = ("normal", "retry", "dlq", "system")

_SYSTEM_TOPICS = frozenset({DEFAULT_TOPIC, SCHEDULE_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, BENCHMARK_TOPIC,
                            "TRANS_CHECK_MAX_TIME_TOPIC"})
_SYSTEM_GROUPS = frozenset({TOOLS_CONSUMER_GROUP, "FERRYMQ_CONSOLE_PRODUCER", "CLIENT_INNER_PRODUCER",
                            "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER",
                            "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL"})


def topic_kind(topic: str, cluster_and_broker_names: set[str] = frozenset()) -> str:
    """``cluster_and_broker_names``: RocketMQ brokers also keep a topic named after their
    cluster and one after themselves."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if (topic in _SYSTEM_TOPICS or topic.startswith(("RMQ_SYS_", "rmq_sys_")) or topic.endswith("_REPLY_TOPIC")
            or topic in cluster_and_broker_names):
        return "system"
    return "normal"


def group_is_system(group: str) -> bool:
    return group in _SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")
