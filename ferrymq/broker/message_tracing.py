"""OpenTelemetry spans for a message's way through the broker (docs/operations.md#opentelemetry).

A message that carries a W3C trace context (the ``traceparent``/``tracestate`` properties that
OpenTelemetry's RocketMQ instrumentations inject, or a RocketMQ 5 client's ``trace_context``,
kept as the ``TRACE_CONTEXT`` property) gets, in that trace:

* ``store <topic>`` when the broker stores it (remoting and gRPC sends);
* ``deliver <topic>`` each time a pull, a pop or a gRPC receive hands it to a consumer group;
* ``ack <topic>`` when a pop or gRPC consumer acknowledges it.

Only sampled trace contexts are continued (parent-based; a message without one starts no trace),
and spans go to an OTLP/HTTP endpoint (``otelTracesEndpoint``) through the SDK's batch processor,
on its own thread. Off (the default), every call returns at once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Mapping

from ferrymq.common.message import MessageExt, Prop, decode_record

__all__ = ["MessageTracing", "NO_TRACING", "message_tracing"]

TRACE_CONTEXT = Prop.TRACE_CONTEXT
_CARRIER_KEYS = ("traceparent", TRACE_CONTEXT)
_CARRIER_BYTES = tuple(k.encode() for k in _CARRIER_KEYS)  # a raw record that may carry one
_DELIVERED_KEPT = 100_000  # deliveries remembered for their ack's span (the oldest forgotten first)


def carries_context(properties: Mapping[str, str]) -> bool:
    return any(k in properties for k in _CARRIER_KEYS)


class MessageTracing:
    """Tracing off: nothing is done, nothing is imported."""

    enabled = False

    def stored(self, messages: Iterable[MessageExt], *, queue_id: int, first_offset: int, msg_ids: list[str]) -> None:
        pass

    def delivered_records(self, records: Iterable[bytes], *, group: str, via: str) -> None:
        pass

    def delivered(self, messages: Iterable[tuple[MessageExt, int]], *, group: str, via: str) -> None:
        pass

    def acked(self, *, group: str, topic: str, commit_log_offset: int, via: str) -> None:
        pass

    def shutdown(self) -> None:
        pass


NO_TRACING = MessageTracing()


class _OtlpTracing(MessageTracing):
    enabled = True

    def __init__(self, endpoint: str, service_name: str, broker_name: str, cluster: str, *,
                 exporter=None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporter = OTLPSpanExporter(endpoint=endpoint)
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service_name, "messaging.system": "rocketmq",
                                      "ferrymq.broker.name": broker_name, "ferrymq.cluster": cluster}),
            sampler=ParentBased(ALWAYS_OFF))  # continue sampled traces; never start one
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("ferrymq.broker")
        self._propagator = TraceContextTextMapPropagator()
        self._server = SpanKind.SERVER
        self._broker = broker_name
        self._delivered: OrderedDict[tuple[str, str, int], object] = OrderedDict()

    def _context(self, properties: Mapping[str, str]):
        carrier = {"traceparent": properties.get("traceparent") or properties.get(TRACE_CONTEXT, "")}
        if "tracestate" in properties:
            carrier["tracestate"] = properties["tracestate"]
        return self._propagator.extract(carrier)

    def _span(self, name: str, context, attributes: dict) -> None:
        span = self._tracer.start_span(name, context=context, kind=self._server,
                                       attributes={"messaging.system": "rocketmq", **attributes})
        span.end()

    def stored(self, messages, *, queue_id, first_offset, msg_ids):
        for i, m in enumerate(messages):
            if not carries_context(m.properties):
                continue
            topic = m.properties.get(Prop.REAL_TOPIC, m.topic)  # a half, timer or delayed message's own topic
            self._span(f"store {topic}", self._context(m.properties), {
                "messaging.operation.type": "send", "messaging.operation.name": "store",
                "messaging.destination.name": topic, "messaging.destination.partition.id": str(queue_id),
                "messaging.message.id": m.properties.get(Prop.UNIQ_KEY, msg_ids[i] if i < len(msg_ids) else ""),
                "messaging.rocketmq.message.offset": first_offset + i,
                "messaging.message.body.size": len(m.body), "ferrymq.broker": self._broker})

    def delivered_records(self, records, *, group, via):
        traced = (r for r in records if any(k in r for k in _CARRIER_BYTES))  # decoded only when they may be
        self.delivered(((decode_record(r)[0], 1) for r in traced), group=group, via=via)

    def delivered(self, messages, *, group, via):
        for m, attempt in messages:
            if not carries_context(m.properties):
                continue
            context = self._context(m.properties)
            self._span(f"deliver {m.topic}", context, {
                "messaging.operation.type": "receive", "messaging.operation.name": via,
                "messaging.destination.name": m.topic, "messaging.consumer.group.name": group,
                "messaging.destination.partition.id": str(m.queue_id), "messaging.message.id": m.client_msg_id,
                "messaging.rocketmq.message.offset": m.queue_offset, "messaging.rocketmq.delivery_attempt": attempt,
                "ferrymq.broker": self._broker})
            key = (group, m.topic, m.commit_log_offset)
            self._delivered[key] = (context, m.client_msg_id, m.queue_id)
            self._delivered.move_to_end(key)
            while len(self._delivered) > _DELIVERED_KEPT:
                self._delivered.popitem(last=False)

    def acked(self, *, group, topic, commit_log_offset, via):
        found = self._delivered.pop((group, topic, commit_log_offset), None)
        if found is None:
            return
        context, msg_id, queue_id = found
        self._span(f"ack {topic}", context, {
            "messaging.operation.type": "settle", "messaging.operation.name": via,
            "messaging.destination.name": topic, "messaging.consumer.group.name": group,
            "messaging.destination.partition.id": str(queue_id), "messaging.message.id": msg_id,
            "ferrymq.broker": self._broker})

    def shutdown(self) -> None:
        self._provider.shutdown()  # exports what is queued (the SDK bounds the wait)


def message_tracing(endpoint: str, *, service_name: str, broker_name: str, cluster: str,
                    exporter=None) -> MessageTracing:
    """Tracing to ``endpoint`` (OTLP over HTTP, e.g. ``http://collector:4318/v1/traces``), or off
    when it is empty. Raises RuntimeError when the OpenTelemetry SDK is not installed."""
    if not endpoint and exporter is None:
        return NO_TRACING
    try:
        return _OtlpTracing(endpoint, service_name, broker_name, cluster, exporter=exporter)
    except ImportError as e:
        raise RuntimeError(f"otelTracesEndpoint is set but the OpenTelemetry SDK is not installed "
                           f"(pip install 'ferrymq[otel]'): {e}") from None
