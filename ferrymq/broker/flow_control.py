"""Admission control for sends (RocketMQ's BrokerFastFailure): refuse at once, with
SYSTEM_BUSY and RocketMQ's remarks, a send the store could not take in time, instead of
letting requests and memory pile up behind a slow disk. The client then tries another
broker. Pulls, heartbeats and admin requests are never refused here."""

from __future__ import annotations

from ferrymq.broker.async_store import WriteBacklog
from ferrymq.broker.config import BrokerConfig


def send_refusal(backlog: WriteBacklog, config: BrokerConfig) -> str | None:
    """The SYSTEM_BUSY remark for a send arriving now; None to accept it."""
    if not config.broker_fast_failure_enable:
        return None
    if backlog.running_ms >= config.os_page_cache_busy_time_out_mills:
        return (f"[PC_SYNCHRONIZED]broker busy, start flow control for a while, "
                f"period in queue: {backlog.running_ms}ms, size of queue: {backlog.pending}")
    if backlog.pending >= config.send_thread_pool_queue_capacity:
        return "[OVERLOAD]system busy, start flow control for a while"
    if backlog.oldest_wait_ms >= config.wait_time_mills_in_send_queue:
        return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                f"period in queue: {backlog.oldest_wait_ms}ms, size of queue: {backlog.pending}")
    return None
