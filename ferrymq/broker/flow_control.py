"""Admission control for sends (RocketMQ's BrokerFastFailure): refuse at once, with
SYSTEM_BUSY and RocketMQ's remarks, a send the store could not take in time, instead of
letting requests and memory pile up behind a slow disk. The client then tries another
broker. Pulls, heartbeats and admin requests are never refused here."""

from __future__ import annotations

from ferrymq.broker.config import BrokerConfig
from ferrymq.store.loop_bridge import WriteBacklog


def send_refusal(backlog: WriteBacklog, config: BrokerConfig, queued_ms: int = 0) -> str | None:
    """The SYSTEM_BUSY remark for a send about to be processed; None to accept it.

    ``queued_ms``: how long this request waited between being read and being processed (the
    event loop's queue, RocketMQ's send thread pool queue); ``backlog``: the store writer's
    queue, which holds writes only while appends are offloaded from the loop."""
    if not config.broker_fast_failure_enable:
        return None
    if backlog.running_ms >= config.os_page_cache_busy_time_out_mills:
        return (f"[PC_SYNCHRONIZED]broker busy, start flow control for a while, "
                f"period in queue: {backlog.running_ms}ms, size of queue: {backlog.pending}")
    if backlog.pending >= config.send_thread_pool_queue_capacity:
        return "[OVERLOAD]system busy, start flow control for a while"
    waited = max(backlog.oldest_wait_ms, queued_ms)
    if waited >= config.wait_time_mills_in_send_queue:
        return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                f"period in queue: {waited}ms, size of queue: {backlog.pending}")
    return None
