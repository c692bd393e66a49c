"""``ferrymq produce``, ``ferrymq consume`` and ``ferrymq admin ...``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from ferrymq.acl.signature import Credentials
from ferrymq.cli.output import emit_json, table
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig, default_namesrv
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.config_loader import parse_assignments
from ferrymq.common.message import Message, MessageExt
from ferrymq.common.protocol import MessageQueue, Perm
from ferrymq.remoting.tls import ClientTls


def add_namesrv(p: argparse.ArgumentParser) -> None:
    """The options every client command shares: where, how to sign, TLS, output."""
    p.add_argument("-n", "--namesrv", default=None, help="name servers (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--json", action="store_true", help="machine-readable output, one JSON object per line")
    p.add_argument("--access-key", default=None,
                   help="ACL account (default $FERRYMQ_ACCESS_KEY); its secret from $FERRYMQ_SECRET_KEY")
    p.add_argument("--tls", action="store_true", help="TLS to every server (default: $FERRYMQ_TLS)")
    p.add_argument("--tls-ca-file", default=None, help="verify servers against this CA (default $FERRYMQ_TLS_CA_FILE)")
    p.add_argument("--tls-insecure", action="store_true", help="accept any server certificate (test certificates)")


def namesrv_of(args: argparse.Namespace) -> str:
    return args.namesrv or default_namesrv()


def client_config(args: argparse.Namespace) -> ClientConfig:
    """The clients' settings from the flags, falling back to the environment. The secret key
    comes only from the environment, so that it never shows in a process list."""
    config = ClientConfig(namesrv_addr=namesrv_of(args))
    if args.access_key:
        secret = os.environ.get("FERRYMQ_SECRET_KEY")
        if not secret:
            raise MQClientError("--access-key needs the secret key in $FERRYMQ_SECRET_KEY")
        config.credentials = Credentials(args.access_key, secret)
    if args.tls or args.tls_ca_file or args.tls_insecure:
        ca_file = args.tls_ca_file or os.environ.get("FERRYMQ_TLS_CA_FILE") or None
        config.tls = ClientTls(ca_file=ca_file, insecure=args.tls_insecure or ca_file is None)
    return config


# ---------------------------------------------------------------------- produce

async def run_produce(args: argparse.Namespace) -> int:
    properties = parse_assignments(args.property)
    if args.stdin:
        bodies = [line.rstrip("\n").encode() for line in sys.stdin if line.strip()]
    elif args.body is not None:
        bodies = [args.body.encode()] * args.count
    else:
        bodies = [(f"message {i} " * (args.size // 10 + 1)).encode()[: args.size] for i in range(args.count)]

    def make(i: int, body: bytes) -> Message:
        m = Message(args.topic, body, properties=dict(properties))
        if args.tags:
            m.tags = args.tags
        if args.keys:
            m.keys = [k.replace("{i}", str(i)) for k in args.keys.split()]
        return m

    messages = [make(i, b) for i, b in enumerate(bodies)]
    async with Producer(args.group, config=client_config(args)) as producer:
        started = time.monotonic()
        if args.batch > 1:
            results = [await producer.send_batch(messages[i:i + args.batch]) for i in range(0, len(messages), args.batch)]
        elif args.mode == "oneway":
            for m in messages:
                await producer.send_oneway(m)
            results = []
        elif args.mode == "async":
            results = await asyncio.gather(*(producer.send_async(m) for m in messages))
        else:
            results = [await producer.send(m) for m in messages]
        elapsed = time.monotonic() - started
    for r in results:
        if args.json:
            emit_json(r.to_dict())
        else:
            print(f"{r.status.name} msgId={r.msg_id} queue={r.message_queue.broker_name}#{r.message_queue.queue_id} "
                  f"offset={r.queue_offset}")
    if not args.json:
        print(f"sent {len(messages)} message(s) to {args.topic} in {elapsed:.3f}s ({args.mode if args.batch <= 1 else 'batch'})")
    return 0


# ---------------------------------------------------------------------- consume

def describe(m: MessageExt) -> dict:
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset, "msgId": m.client_msg_id,
            "tags": m.tags, "keys": " ".join(m.keys) or None, "body": m.body.decode("utf-8", "replace"),
            "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp, "properties": m.properties}


async def run_consume(args: argparse.Namespace) -> int:
    received = 0
    deadline = time.monotonic() + args.timeout
    async with PullConsumer(args.group, config=client_config(args)) as consumer:
        queues = await consumer.fetch_queues(args.topic)
        positions: dict[MessageQueue, int] = {}
        for mq in queues:
            if args.start == "earliest":
                positions[mq] = await consumer.min_offset(mq)
            elif args.start == "latest":
                positions[mq] = await consumer.max_offset(mq)
            else:
                committed = await consumer.committed(mq)
                positions[mq] = committed if committed >= 0 else await consumer.min_offset(mq)
        while time.monotonic() < deadline and (args.count <= 0 or received < args.count):
            progressed = False
            for mq in queues:
                result = await consumer.pull(mq, positions[mq], expression=args.expression, max_nums=32)
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    positions[mq] = result.next_begin_offset
                    continue
                for m in result.messages:
                    if args.count > 0 and received >= args.count:
                        break
                    received += 1
                    if args.json:
                        emit_json(describe(m))
                    else:
                        print(f"[{m.topic}#{m.queue_id}@{m.queue_offset}] tags={m.tags} keys={' '.join(m.keys)} "
                              f"body={m.body.decode('utf-8', 'replace')!r}")
                if result.next_begin_offset != positions[mq]:
                    progressed = True
                    positions[mq] = result.next_begin_offset
                    if args.commit:
                        await consumer.commit(mq, positions[mq])
            if not progressed:
                # Nothing anywhere: hold one pull on the first queue instead of spinning.
                mq = queues[0]
                wait = min(1.0, max(0.0, deadline - time.monotonic()))
                if wait > 0:
                    await consumer.pull(mq, positions[mq], expression=args.expression, max_nums=1, suspend=wait)
    if not args.json:
        print(f"received {received} message(s) from {args.topic}")
    return 0


# ---------------------------------------------------------------------- admin

async def run_topic_create(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        addrs = await admin.create_topic(args.topic, read_queues=args.read_queues or args.queues,
                                         write_queues=args.write_queues or args.queues, perm=args.perm,
                                         order=args.order, cluster=args.cluster, broker_addr=args.broker)
    if args.json:
        emit_json({"topic": args.topic, "brokers": addrs})
    else:
        print(f"topic {args.topic} created on {', '.join(addrs)}")
    return 0


async def run_topic_list(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        topics = await admin.topic_list()
    if args.json:
        emit_json({"topics": topics})
    else:
        print("\n".join(topics))
    return 0


async def run_topic_route(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        route = await admin.topic_route(args.topic)
    if args.json:
        emit_json(route.to_dict() | {"brokerDatas": [
            {"brokerName": b.broker_name, "cluster": b.cluster, "brokerAddrs": {str(k): v for k, v in b.broker_addrs.items()}}
            for b in route.broker_datas]})
        return 0
    addrs = {b.broker_name: b.master_addr() or "-" for b in route.broker_datas}
    print(table(["broker", "address", "read", "write", "perm"],
                [[q.broker_name, addrs.get(q.broker_name, "-"), q.read_queue_nums, q.write_queue_nums, Perm.describe(q.perm)]
                 for q in route.queue_datas]))
    return 0


async def run_topic_status(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        rows = await admin.topic_stats(args.topic)
    if args.json:
        emit_json({"topic": args.topic, "queues": rows})
        return 0

    def when(ms: int) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"

    print(table(["broker", "queue", "min offset", "max offset", "last updated"],
                [[r["brokerName"], r["queueId"], r["minOffset"], r["maxOffset"], when(r["lastUpdateTimestamp"])] for r in rows]))
    return 0


async def run_topic_delete(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        await admin.delete_topic(args.topic, cluster=args.cluster)
    if args.json:
        emit_json({"topic": args.topic, "deleted": True})
    else:
        print(f"topic {args.topic} deleted from the brokers and name servers")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send messages to a topic")
    add_namesrv(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="ferrymq-cli-producer", help="producer group")
    p.add_argument("-b", "--body", help="message body text (default: generated)")
    p.add_argument("--stdin", action="store_true", help="send one message per line of standard input")
    p.add_argument("--count", type=int, default=1, help="number of messages (default 1)")
    p.add_argument("--size", type=int, default=64, help="generated body size in bytes (default 64)")
    p.add_argument("--tags", help="message tag")
    p.add_argument("--keys", help="space-separated keys; {i} is replaced by the message index")
    p.add_argument("-p", "--property", action="append", default=[], metavar="KEY=VALUE", help="user property (repeatable)")
    p.add_argument("--mode", choices=["sync", "async", "oneway"], default="sync")
    p.add_argument("--batch", type=int, default=1, help="send in batches of this size")
    p.set_defaults(run=run_produce)

    p = sub.add_parser("consume", help="read messages from a topic")
    add_namesrv(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="ferrymq-cli-consumer", help="consumer group")
    p.add_argument("-e", "--expression", default="*", help='tag expression, "*" or "TagA || TagB"')
    p.add_argument("--from", dest="start", choices=["earliest", "latest", "committed"], default="committed",
                   help="where to start (default: the group's committed offset, else earliest)")
    p.add_argument("--count", type=int, default=0, help="stop after this many messages (default: until --timeout)")
    p.add_argument("--timeout", type=float, default=5.0, help="stop after this many seconds (default 5)")
    p.add_argument("--commit", action="store_true", help="commit the group's offsets as messages are read")
    p.set_defaults(run=run_consume)



def register_admin(admin: argparse._SubParsersAction) -> None:
    topic = admin.add_parser("topic", help="topics").add_subparsers(dest="action", required=True)
    p = topic.add_parser("create", help="create or update a topic")
    add_namesrv(p)
    p.add_argument("topic")
    p.add_argument("-q", "--queues", type=int, default=8, help="read and write queues (default 8)")
    p.add_argument("--read-queues", type=int)
    p.add_argument("--write-queues", type=int)
    p.add_argument("--perm", type=int, default=Perm.READ_WRITE, help="permission bits (6 = read+write)")
    p.add_argument("--order", action="store_true")
    p.add_argument("-c", "--cluster", help="create on every master of this cluster (default: all brokers)")
    p.add_argument("-b", "--broker", help="create on this broker address only")
    p.set_defaults(run=run_topic_create)
    p = topic.add_parser("list", help="list topics")
    add_namesrv(p)
    p.set_defaults(run=run_topic_list)
    p = topic.add_parser("route", help="show where a topic's queues are")
    add_namesrv(p)
    p.add_argument("topic")
    p.set_defaults(run=run_topic_route)
    p = topic.add_parser("status", help="offsets of every queue (mqadmin topicStatus)")
    add_namesrv(p)
    p.add_argument("topic")
    p.set_defaults(run=run_topic_status)
    p = topic.add_parser("delete", help="delete a topic from brokers and name servers (mqadmin deleteTopic)")
    add_namesrv(p)
    p.add_argument("topic")
    p.add_argument("-c", "--cluster", help="only from this cluster's brokers")
    p.set_defaults(run=run_topic_delete)
