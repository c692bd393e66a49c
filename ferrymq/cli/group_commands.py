"""``ferrymq admin group create|list|progress|clients|enable|disable|reset-offset``: consumer groups, as
mqadmin's updateSubGroup, consumerProgress and resetOffsetByTime do them."""

from __future__ import annotations

import argparse
import datetime
import time

from ferrymq.cli.client_commands import add_namesrv, client_config
from ferrymq.cli.output import emit_json, table
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.common.consumer_protocol import ClientConnection, ConsumerConnection


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms > 0 else "-"


async def run_group_create(args: argparse.Namespace) -> int:
    settings = dict(consume_enable=not args.disabled, retry_max_times=args.retry_max_times,
                    retry_queue_nums=args.retry_queues, consume_broadcast_enable=not args.no_broadcast,
                    consume_from_min_enable=not args.no_from_min, consume_message_orderly=args.fifo)
    async with AdminClient(config=client_config(args)) as admin:
        addrs = await admin.create_group(args.group, cluster=args.cluster, broker_addr=args.broker, **settings)
    if args.json:
        emit_json({"group": args.group, "brokers": addrs, **settings})
    else:
        print(f"group {args.group} created on {', '.join(addrs)}")
    return 0


async def run_group_list(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        groups = await admin.list_groups(cluster=args.cluster)
    rows = [{"group": g, "broker": b, **c.to_dict()} for g, by_broker in groups.items() for b, c in sorted(by_broker.items())]
    if args.json:
        emit_json({"groups": rows})
    else:
        print(table(["group", "broker", "consume", "broadcast", "retry queues", "max retries"],
                    [[r["group"], r["broker"], "enabled" if r["consumeEnable"] else "DISABLED",
                      r["consumeBroadcastEnable"], r["retryQueueNums"], r["retryMaxTimes"]] for r in rows]))
    return 0


async def run_group_progress(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        stats = await admin.consume_stats(args.group, topic=args.topic, cluster=args.cluster)
        online = await admin.consumer_connections(args.group, cluster=args.cluster)
    members = sorted(c.client_id for c in online.connection_set) if online else []
    by_protocol = protocol_counts(online)
    rows = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "brokerOffset": w.broker_offset,
             "consumerOffset": w.consumer_offset, "lag": w.lag, "lastTimestamp": w.last_timestamp}
            for mq, w in stats.offset_table.items()]
    if args.json:
        emit_json({"group": args.group, "consumeEnable": stats.consume_enable, "totalLag": stats.total_lag(),
                   "consumeTps": stats.consume_tps, "members": members, "onlineByProtocol": by_protocol,
                   "queues": rows})
        return 0
    if not rows:
        raise MQClientError(f"group {args.group} has no consume progress (no offsets and not online)")
    print(table(["topic", "broker", "queue", "broker offset", "consumer offset", "lag", "last consumed"],
                [[r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"], r["lag"],
                  _when(r["lastTimestamp"])] for r in rows]))
    state = {True: "enabled", False: "DISABLED (pulls refused; re-enable: ferrymq admin group enable)", None: "unknown"}
    print(f"\ngroup {args.group}: consume {state[stats.consume_enable]}, total lag {stats.total_lag()}, "
          f"{len(members)} member(s) online{_counts_text(by_protocol)}")
    return 0


def _protocol(c: ClientConnection) -> str:
    return c.protocol or "remoting"  # a RocketMQ broker (or an older FerryMQ) names no protocol


def protocol_counts(online: ConsumerConnection | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in online.connection_set if online else []:
        counts[_protocol(c)] = counts.get(_protocol(c), 0) + 1
    return dict(sorted(counts.items()))


def _counts_text(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{n} {p}' for p, n in counts.items())})" if counts else ""


async def run_group_clients(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        online = await admin.consumer_connections(args.group, cluster=args.cluster)
    rows = [{"clientId": c.client_id, "address": c.client_addr, "protocol": _protocol(c), "language": c.language,
             "version": c.client_version or str(c.version),
             "subscriptions": c.subscriptions if c.subscriptions is not None else
             {t: s.sub_string for t, s in (online.subscription_table.items() if _protocol(c) == "remoting" else ())}}
            for c in (online.connection_set if online else [])]
    rows.sort(key=lambda r: (r["protocol"], r["clientId"]))
    if args.json:
        emit_json({"group": args.group, "online": bool(rows), "consumeType": online.consume_type if online else None,
                   "onlineByProtocol": protocol_counts(online), "clients": rows})
        return 0
    if not rows:
        raise MQClientError(f"group {args.group} has no online consumer (4.x, 5.x gRPC or POP)")
    print(table(["client id", "address", "protocol", "language", "version", "subscriptions"],
                [[r["clientId"], r["address"], r["protocol"], r["language"], r["version"],
                  ", ".join(f"{t}: {e}" for t, e in sorted(r["subscriptions"].items())) or "-"] for r in rows]))
    print(f"\ngroup {args.group}: {len(rows)} client(s) online{_counts_text(protocol_counts(online))}")
    return 0


async def run_group_enable(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        addrs = await admin.set_group_consume_enable(args.group, args.enable, cluster=args.cluster)
    word = "enabled" if args.enable else "disabled"
    if args.json:
        emit_json({"group": args.group, "consumeEnable": args.enable, "brokers": addrs})
    else:
        print(f"group {args.group} {word} on {', '.join(addrs)}")
    return 0


async def run_group_delete(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        await admin.delete_group(args.group, cluster=args.cluster, remove_offsets=args.remove_offsets)
    if args.json:
        emit_json({"group": args.group, "deleted": True, "offsetsRemoved": args.remove_offsets})
    else:
        print(f"group {args.group} deleted" + (" with its offsets" if args.remove_offsets else ""))
    return 0


def parse_reset_point(value: str) -> int | None:
    """``earliest`` -> 0, ``latest`` -> None, epoch ms, or ``yyyy-MM-ddTHH:mm:ss`` (local time)."""
    if value == "earliest":
        return 0
    if value == "latest":
        return None
    if value.isdigit():
        return int(value)
    try:
        return int(time.mktime(datetime.datetime.fromisoformat(value).timetuple()) * 1000)
    except ValueError:
        raise MQClientError(f"--to must be earliest, latest, epoch milliseconds or an ISO date-time, not {value!r}") from None


async def run_group_reset_offset(args: argparse.Namespace) -> int:
    point = parse_reset_point(args.to)
    async with AdminClient(config=client_config(args)) as admin:
        offsets = await admin.reset_offset(args.group, args.topic, timestamp=point, force=not args.only_backwards)
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o} for mq, o in offsets.items()]
    if args.json:
        emit_json({"group": args.group, "topic": args.topic, "queues": rows})
    else:
        print(table(["broker", "queue", "new offset"], [[r["brokerName"], r["queueId"], r["offset"]] for r in rows]))
    return 0


def register_admin(admin: argparse._SubParsersAction) -> None:
    group = admin.add_parser("group", help="consumer groups").add_subparsers(dest="action", required=True)

    p = group.add_parser("delete", help="delete a subscription group (mqadmin deleteSubGroup)")
    add_namesrv(p)
    p.add_argument("group")
    p.add_argument("--remove-offsets", action="store_true", help="also drop the group's committed offsets")
    p.add_argument("-c", "--cluster", help="from every master of this cluster (default: all brokers)")
    p.set_defaults(run=run_group_delete)

    p = group.add_parser("create", help="create or update a subscription group (mqadmin updateSubGroup)")
    add_namesrv(p)
    p.add_argument("group")
    p.add_argument("--retry-max-times", type=int, default=16, help="deliveries before the DLQ (default 16)")
    p.add_argument("--retry-queues", type=int, default=1, help="queues of %%RETRY%%<group> (default 1)")
    p.add_argument("--disabled", action="store_true", help="create with consumption disabled")
    p.add_argument("--no-broadcast", action="store_true", help="refuse broadcasting consumers")
    p.add_argument("--no-from-min", action="store_true", help="consumeFromMinEnable=false")
    p.add_argument("--fifo", action="store_true",
                   help="a FIFO group (consumeMessageOrderly): POP consumers get a queue's messages in order")
    p.add_argument("-c", "--cluster", help="on every master of this cluster (default: all brokers)")
    p.add_argument("-b", "--broker", help="on this broker address only")
    p.set_defaults(run=run_group_create)

    p = group.add_parser("list", help="subscription groups of every broker")
    add_namesrv(p)
    p.add_argument("-c", "--cluster")
    p.set_defaults(run=run_group_list)

    p = group.add_parser("progress", help="lag per queue and whether the group may consume (mqadmin consumerProgress)")
    add_namesrv(p)
    p.add_argument("group")
    p.add_argument("-t", "--topic", help="only this topic")
    p.add_argument("-c", "--cluster")
    p.set_defaults(run=run_group_progress)

    p = group.add_parser("clients", help="online consumers of a group, 4.x remoting, 5.x gRPC and POP "
                                         "(mqadmin consumerConnection)")
    add_namesrv(p)
    p.add_argument("group")
    p.add_argument("-c", "--cluster")
    p.set_defaults(run=run_group_clients)

    for action, enable, text in (("enable", True, "let a group consume again (e.g. after broker protection)"),
                                 ("disable", False, "refuse a group's pulls (NO_PERMISSION)")):
        p = group.add_parser(action, help=text)
        add_namesrv(p)
        p.add_argument("group")
        p.add_argument("-c", "--cluster")
        p.set_defaults(run=run_group_enable, enable=enable)

    p = group.add_parser("reset-offset", help="move a group's offsets on a topic (mqadmin resetOffsetByTime)")
    add_namesrv(p)
    p.add_argument("group")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--to", required=True, help="earliest, latest, epoch milliseconds, or 2024-06-01T12:00:00")
    p.add_argument("--only-backwards", action="store_true", help="never move an offset forward (isForce=false)")
    p.set_defaults(run=run_group_reset_offset)
