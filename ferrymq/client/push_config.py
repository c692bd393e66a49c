"""Push consumer settings, with RocketMQ 4.9's DefaultMQPushConsumer defaults (docs/wire-format.md#client-defaults)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.client.allocation import AllocateAveragely, AllocateStrategy
from ferrymq.client.offset_store import default_offset_dir


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # the group shares the queues; offsets live on the broker
    BROADCASTING = "BROADCASTING"  # every member reads everything; offsets in a local file


class ConsumeFromWhere(enum.Enum):
    """Where a group starts on a queue it has no offset for (names as on the wire)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


def default_consume_timestamp() -> str:
    """Half an hour ago, as ``yyyyMMddHHmmss`` (RocketMQ's default consumeTimestamp)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(time.time() - 1800))


@dataclass
class PushConsumerConfig:
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    consume_timestamp: str = field(default_factory=default_consume_timestamp)
    allocate_strategy: AllocateStrategy = field(default_factory=AllocateAveragely)
    # Listener concurrency: at most this many listener calls at once (sync ones in threads).
    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    # Flow control: stop pulling a queue while it holds this much unconsumed; pulling resumes
    # as soon as the listener consumes some (RocketMQ re-checks every 50 ms instead).
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    consume_concurrently_max_span: int = 2000
    pull_interval: float = 0.0
    flow_control_delay: float = 1.0  # the longest a flow-controlled pull waits between checks
    pull_delay_on_error: float = 1.0
    broker_suspend_max: float = 15.0  # a pull is held on the broker at most this long
    pull_timeout: float = 30.0
    max_reconsume_times: int = -1  # -1: 16 for concurrent listeners, unlimited for orderly ones
    suspend_current_queue_time_millis: int = 1000  # orderly: pause a queue this long after a failure
    send_back_timeout: float = 5.0
    retry_local_delay: float = 5.0  # a message whose send-back failed is consumed again after this
    rebalance_interval: float = 20.0
    lock_interval: float = 20.0  # orderly: renew queue locks this often
    persist_consumer_offset_interval: float = 5.0
    # Concurrent listeners: messages whose listener call has run this long (minutes,
    # RocketMQ's consumeTimeout) are sent back for a later retry and their queue moves on.
    consume_timeout: float = 15.0
    await_termination: float = 5.0  # shutdown: wait this long for listener calls in progress
    offset_store_dir: Path = field(default_factory=default_offset_dir)  # broadcasting offsets

    def effective_max_reconsume_times(self, orderly: bool) -> int:
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if orderly else 16
        return self.max_reconsume_times
