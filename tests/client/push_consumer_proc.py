"""A FerryMQ push consumer as its own process, for tests that kill consumers (SIGKILL).

    python tests/client/push_consumer_proc.py --namesrv H:P --group G --topic T [--orderly]

stdout: JSON lines: {"event": "ready", "clientId": ...}, {"event": "assigned", "queues": [[topic,
broker, queueId], ...]} after every assignment change, {"event": "received", "key", "topic",
"queueId", "queueOffset", "reconsumeTimes"} per delivery. Closing stdin shuts it down cleanly
({"event": "done"}, exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading

from ferrymq.client.push_consumer import PushConsumer

_out = threading.Lock()


def emit(**event) -> None:
    with _out:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--orderly", action="store_true")
    args = p.parse_args()

    def listen(msgs, context):
        for m in msgs:
            emit(event="received", key=m.keys[0] if m.keys else m.client_msg_id, topic=m.topic, queueId=m.queue_id,
                 queueOffset=m.queue_offset, reconsumeTimes=m.reconsume_times)

    consumer = PushConsumer(args.group, namesrv_addr=args.namesrv)
    consumer.subscribe(args.topic)
    consumer.register_listener(listen, orderly=args.orderly)
    consumer.assignment_listeners.append(
        lambda owned: emit(event="assigned", queues=[[m.topic, m.broker_name, m.queue_id] for m in owned]))
    await consumer.start()
    emit(event="ready", clientId=consumer.client_id,
         queues=[[m.topic, m.broker_name, m.queue_id] for m in consumer.rebalancer.owned()])
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until stdin closes
    await consumer.shutdown()
    emit(event="done", consumed=consumer.consumed)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
