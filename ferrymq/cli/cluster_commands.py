"""``ferrymq admin cluster|broker ...``: what mqadmin's clusterList, brokerStatus and
getBrokerConfig/updateBrokerConfig do, and the timers waiting on a broker."""

from __future__ import annotations

import argparse
import datetime
import json
import time

from ferrymq.cli.client_commands import add_namesrv, client_config
from ferrymq.cli.output import emit_json, table
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.common.config_loader import parse_assignments


async def run_cluster_list(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        info = await admin.cluster_info()
        rows = []
        for cluster, names in sorted(info.cluster_addr_table.items()):
            for name in sorted(names):
                for broker_id, addr in sorted(info.broker_addr_table[name].broker_addrs.items()):
                    try:
                        runtime = await admin.broker_runtime_info(addr)
                    except MQClientError as e:
                        runtime = {"error": str(e)}
                    rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id, "address": addr,
                                 "version": runtime.get("brokerVersionDesc", "?"),
                                 "putTps": float(runtime.get("putTps", "0").split()[0] or 0),
                                 "getTps": float(runtime.get("getTransferedTps", "0").split()[0] or 0),
                                 "messagesInToday": int(runtime.get("msgPutTotalTodayNow", 0) or 0),
                                 "diskRatio": float(runtime.get("commitLogDiskRatio", 0) or 0),
                                 "replication": replication_of(runtime)})
    if args.json:
        emit_json({"brokers": rows})
    else:
        print(table(["cluster", "broker", "id", "address", "version", "in/s", "out/s", "in today", "disk", "replication"],
                    [[r["cluster"], r["brokerName"], r["brokerId"], r["address"], r["version"], f"{r['putTps']:.1f}",
                      f"{r['getTps']:.1f}", r["messagesInToday"], f"{r['diskRatio']:.0%}",
                      replication_text(r["replication"])] for r in rows]))
    return 0


def replication_of(runtime: dict[str, str]) -> dict | None:
    """A broker's replication as its runtime info tells it (ferrymqHa* keys; None from a broker
    without them, e.g. Apache RocketMQ): a master's connected slaves with their lag in bytes and
    seconds, or a slave's link to its master."""
    role = runtime.get("ferrymqHaRole")
    if not role:
        return None
    epoch = {"epoch": int(runtime["ferrymqHaEpoch"])} if runtime.get("ferrymqHaEpoch", "").isdigit() else {}
    if role == "SLAVE":
        return {"role": role, "connected": runtime.get("ferrymqHaConnected") == "true",
                "masterAddress": runtime.get("ferrymqHaMasterAddress") or None, **epoch}
    try:
        slaves = json.loads(runtime.get("ferrymqHaSlaves") or "[]")
    except ValueError:
        slaves = []
    return {"role": role, "slaves": [{"address": s.get("address"), "lagBytes": s.get("lagBytes"),
                                      "lagSeconds": s.get("lagSeconds")} for s in slaves], **epoch}


def replication_text(replication: dict | None) -> str:
    """One cell: a master's slaves and the furthest one's lag, or a slave's link."""
    if replication is None:
        return "-"
    if "slaves" not in replication:
        return "slave, " + ("connected" if replication["connected"] else "NOT connected")
    slaves = replication["slaves"]
    if not slaves:
        return "no slave connected" if replication["role"] == "SYNC_MASTER" else "-"
    worst = max(slaves, key=lambda s: (s["lagBytes"] or 0, s["lagSeconds"] or 0))
    return f"{len(slaves)} slave(s), lag {worst['lagBytes']} B / {worst['lagSeconds']:.1f} s"


async def run_broker_status(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        info = await admin.broker_runtime_info(args.broker)
    if args.json:
        emit_json(info)
    else:
        print(table(["key", "value"], sorted(info.items())))
    return 0


async def run_broker_timers(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        metrics = await admin.timer_metrics(args.broker)
    now = time.time() * 1000
    rows = [{"topic": topic, "pending": m.count, "earliestDueMs": m.earliest_due_ms}
            for topic, m in sorted(metrics.timing_count.items())]
    if args.json:
        emit_json({"broker": args.broker, "topics": rows})
    elif not rows:
        print(f"no timers pending on {args.broker}")
    else:
        print(table(["topic", "pending", "earliest due (UTC)", "due in"],
                    [[r["topic"], r["pending"], due_text(r["earliestDueMs"]), f"{max(0.0, (r['earliestDueMs'] - now) / 1000):.0f} s"]
                     for r in rows]))
    return 0


def due_text(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


async def run_broker_config_get(args: argparse.Namespace) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        config = await admin.broker_config(args.broker)
    if args.json:
        emit_json(config)
    else:
        print("\n".join(f"{k}={v}" for k, v in sorted(config.items())))
    return 0


async def run_broker_config_set(args: argparse.Namespace) -> int:
    settings = parse_assignments(args.settings)
    async with AdminClient(config=client_config(args)) as admin:
        await admin.update_broker_config(args.broker, settings)
    if args.json:
        emit_json({"broker": args.broker, "updated": settings})
    else:
        print(f"updated on {args.broker}: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    return 0


def register_admin(admin: argparse._SubParsersAction) -> None:
    cluster = admin.add_parser("cluster", help="clusters").add_subparsers(dest="action", required=True)
    p = cluster.add_parser("list", help="brokers of every cluster with their traffic and replication lag (mqadmin clusterList)")
    add_namesrv(p)
    p.set_defaults(run=run_cluster_list)

    broker = admin.add_parser("broker", help="one broker").add_subparsers(dest="action", required=True)
    p = broker.add_parser("status", help="runtime info (mqadmin brokerStatus)")
    add_namesrv(p)
    p.add_argument("-b", "--broker", required=True, help="broker address host:port")
    p.set_defaults(run=run_broker_status)
    p = broker.add_parser("timers", help="timer messages waiting per topic: how many, the first due (RocketMQ 5 GET_TIMER_METRICS)")
    add_namesrv(p)
    p.add_argument("-b", "--broker", required=True, help="broker address host:port")
    p.set_defaults(run=run_broker_timers)
    p = broker.add_parser("config", help="show a broker's configuration (mqadmin getBrokerConfig)")
    add_namesrv(p)
    p.add_argument("-b", "--broker", required=True, help="broker address host:port")
    p.set_defaults(run=run_broker_config_get)
    p = broker.add_parser("set-config", help="change broker settings at run time (mqadmin updateBrokerConfig)")
    add_namesrv(p)
    p.add_argument("-b", "--broker", required=True, help="broker address host:port")
    p.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    p.set_defaults(run=run_broker_config_set)
