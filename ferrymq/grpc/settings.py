"""The server's answer to a client's Settings on the Telemetry stream (clients wait 3 s for
it): the retry policy, and for producers the publishing limits, for consumers the
subscription's FIFO flag, batch size and long-polling time."""

from __future__ import annotations

from ferrymq.grpc.messages import to_duration
from ferrymq.grpc.protocol import pb

RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_MS = 30_000
FIRST_RETRY_LEVEL = 3  # a consumer's retry waits as RocketMQ's: 10 s, 30 s, 1 min, ... (levels 3 onward)


def consumer_backoff(levels_ms: list[int], max_attempts: int) -> pb.RetryPolicy:
    delays = levels_ms[FIRST_RETRY_LEVEL - 1:] or levels_ms[-1:]
    return pb.RetryPolicy(max_attempts=max_attempts,
                          customized_backoff=pb.CustomizedBackoff(next=[to_duration(ms) for ms in delays]))


def producer_backoff(client: pb.RetryPolicy) -> pb.RetryPolicy:
    """The producer's own exponential policy, or RocketMQ's default (3 attempts, 10 ms x2 up to 1 s)."""
    if client.HasField("exponential_backoff"):
        return pb.RetryPolicy(max_attempts=client.max_attempts or 3, exponential_backoff=client.exponential_backoff)
    return pb.RetryPolicy(max_attempts=client.max_attempts or 3, exponential_backoff=pb.ExponentialBackoff(
        initial=to_duration(10), max=to_duration(1000), multiplier=2.0))


def server_settings(client: pb.Settings, *, max_body_size: int, levels_ms: list[int], retry_max_times: int,
                    fifo: bool) -> pb.Settings:
    """What the server tells a client after its Settings (the client's own echoed where it leads)."""
    out = pb.Settings(client_type=client.client_type, user_agent=client.user_agent)
    if client.HasField("access_point"):
        out.access_point.CopyFrom(client.access_point)
    if client.HasField("request_timeout"):
        out.request_timeout.CopyFrom(client.request_timeout)
    if client.client_type == pb.ClientType.PRODUCER or client.HasField("publishing"):
        out.backoff_policy.CopyFrom(producer_backoff(client.backoff_policy))
        out.publishing.CopyFrom(pb.Publishing(topics=client.publishing.topics, max_body_size=max_body_size,
                                              validate_message_type=True))
    else:
        out.backoff_policy.CopyFrom(consumer_backoff(levels_ms, retry_max_times + 1))
        sub = client.subscription
        out.subscription.CopyFrom(pb.Subscription(
            group=sub.group, subscriptions=sub.subscriptions, fifo=fifo,
            receive_batch_size=sub.receive_batch_size or RECEIVE_BATCH_SIZE,
            long_polling_timeout=sub.long_polling_timeout if sub.HasField("long_polling_timeout")
            else to_duration(LONG_POLLING_TIMEOUT_MS)))
    return out
