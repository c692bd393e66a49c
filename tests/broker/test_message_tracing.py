"""OpenTelemetry (otelTracesEndpoint): a message that carries a sampled W3C trace context gets
``store``, ``deliver`` and ``ack`` spans in that trace, exported over OTLP/HTTP by the SDK's
exporter to a receiver started here (it decodes what a collector would). Producers and the
simple consumer are the official RocketMQ 5 Python client over gRPC; the puller our remoting client."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from aiohttp import web

from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.protocol import MessageQueue
from tests.consumer_support import create_topic
from tests.support import InProcessCluster
from testkit.ports import free_port

pytestmark = pytest.mark.integration

otlp = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


class OtlpReceiver:
    """POST /v1/traces: ExportTraceServiceRequest in protobuf, as an OpenTelemetry Collector takes it."""

    def __init__(self) -> None:
        self.spans: list = []  # (resource attributes, span)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self.traces)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def traces(self, request: web.Request) -> web.Response:
        export = otlp.ExportTraceServiceRequest.FromString(await request.read())
        for rs in export.resource_spans:
            resource = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                self.spans.extend((resource, s) for s in ss.spans)
        return web.Response(body=otlp.ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")


def _attrs(span) -> dict:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


async def in_sdk_thread(fn):
    """``fn`` (calls of the rocketmq Python SDK) in a worker thread that has an event loop of its
    own, as a main thread has: the SDK creates some grpc.aio calls in the calling thread (the
    telemetry stream of a new channel), and in a bare worker thread that fails ("There is no
    current event loop in thread 'asyncio_0'"), the route lookup with it."""
    def run():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return fn()
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return await asyncio.to_thread(run)


async def test_a_traced_message_gets_store_deliver_and_ack_spans_in_its_own_trace(tmp_path):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

    receiver = OtlpReceiver()
    await receiver.start()
    cluster = await InProcessCluster(tmp_path / "store", settings={
        "grpcListenPort": 0, "otelTracesEndpoint": receiver.url, "otelServiceName": "mq-under-test"}).start()
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    topic = "Traced"
    try:
        await create_topic(cluster.namesrv_addr, topic, queues=1)
        config = ClientConfiguration(f"127.0.0.1:{cluster.broker.grpc.port}", Credentials())

        def produce() -> None:
            producer = Producer(config, (topic,))
            producer.startup()
            try:
                for key, traceparent in (("sampled", f"00-{trace_id}-{parent_id}-01"),
                                         ("unsampled", f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00"),
                                         ("plain", None)):
                    m = Message()
                    m.topic, m.body, m.keys = topic, key.encode(), key
                    if traceparent:
                        m.add_property("traceparent", traceparent)
                    producer.send(m)
            finally:
                producer.shutdown()

        def receive_and_ack() -> int:
            consumer = SimpleConsumer(config, "poppers", {topic: FilterExpression("*")}, await_duration=3)
            consumer.startup()
            try:
                got = 0
                for _ in range(10):
                    for m in consumer.receive(16, 20):
                        consumer.ack(m)
                        got += 1
                    if got >= 3:
                        break
                return got
            finally:
                consumer.shutdown()

        await in_sdk_thread(produce)
        async with PullConsumer("pullers", namesrv_addr=cluster.namesrv_addr) as puller:
            pulled = await puller.pull(MessageQueue(topic, cluster.broker.config.broker_name, 0), 0)
            assert len(pulled.messages) == 3
        assert await in_sdk_thread(receive_and_ack) == 3
    finally:
        await cluster.stop()  # the broker's stop exports the spans still queued
        await receiver.runner.cleanup()

    spans = [(r, s) for r, s in receiver.spans]
    assert spans, "the broker exported no span"
    assert {s.trace_id.hex() for _, s in spans} == {trace_id}, "only the sampled message is traced"
    assert all(s.parent_span_id.hex() == parent_id for _, s in spans), "each span continues the producer's span"
    by_name = {}
    for resource, s in spans:
        by_name.setdefault(s.name, []).append(_attrs(s))
        assert resource["service.name"] == "mq-under-test" and resource["ferrymq.broker.name"] == "broker-a"
    assert sorted(by_name) == [f"ack {topic}", f"deliver {topic}", f"store {topic}"]
    [store] = by_name[f"store {topic}"]
    assert store["messaging.destination.name"] == topic and store["messaging.operation.type"] == "send"
    delivered = sorted((d["messaging.operation.name"], d["messaging.consumer.group.name"])
                       for d in by_name[f"deliver {topic}"])
    assert delivered == [("pop", "poppers"), ("pull", "pullers")]
    [ack] = by_name[f"ack {topic}"]
    assert ack["messaging.consumer.group.name"] == "poppers" and ack["messaging.operation.type"] == "settle"
    assert ack["messaging.message.id"] == store["messaging.message.id"]
