"""What ``make run`` shows once the standalone server is up: a message produced and
consumed through the Python client, and how to go on."""

from __future__ import annotations

import time

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message

DEMO_TOPIC = "FerryDemo"


async def run_demo(namesrv: str) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.create_topic(DEMO_TOPIC, read_queues=4, write_queues=4)
    text = f"hello from FerryMQ at {time.strftime('%H:%M:%S')}"
    message = Message(DEMO_TOPIC, text.encode(), properties={"source": "make-run"})
    message.tags = "demo"
    message.keys = ["demo-1"]
    async with Producer("demo-producer", namesrv_addr=namesrv) as producer:
        sent = await producer.send(message)
    print(f"produced: {text!r} -> {DEMO_TOPIC} queue {sent.message_queue.queue_id} offset {sent.queue_offset} "
          f"(msgId {sent.msg_id})")
    async with PullConsumer("demo-consumer", namesrv_addr=namesrv) as consumer:
        result = await consumer.pull(sent.message_queue, sent.queue_offset, max_nums=1, suspend=3.0)
        got = result.messages[0] if result.messages else None
        if got is not None:
            await consumer.commit(sent.message_queue, result.next_begin_offset)
    if got is None:
        print("consumed: nothing came back (unexpected; see the log above)")
    else:
        print(f"consumed: {got.body.decode()!r} tags={got.tags} keys={' '.join(got.keys)} "
              f"properties={{'source': {got.properties.get('source')!r}}}")
    print(f"""
Next, in another terminal:
  .venv/bin/ferrymq produce -n {namesrv} -t {DEMO_TOPIC} --count 10 --tags demo
  .venv/bin/ferrymq consume -n {namesrv} -t {DEMO_TOPIC} --from earliest
  .venv/bin/ferrymq admin topic list -n {namesrv}
  .venv/bin/ferrymq admin topic route -n {namesrv} {DEMO_TOPIC}
Official RocketMQ 4.x clients: use name server {namesrv} (NAMESRV_ADDR).
Serving until Ctrl-C.""", flush=True)
