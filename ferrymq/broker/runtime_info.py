"""What the broker reports about itself: GET_BROKER_RUNTIME_INFO's table (mqadmin
brokerStatus), with its replication entries, and the per-group lag the metrics and the
operator read."""

from __future__ import annotations

import asyncio
import json
import shutil
import time

from ferrymq import __version__
from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.context import BrokerContext
from ferrymq.remoting.codes import CURRENT_VERSION
from ferrymq.store.asyncio_store import AsyncMessageStore


async def runtime_info(ctx: BrokerContext, replication: dict | None = None) -> dict[str, str]:
    """RocketMQ's runtime-info keys (the ones mqadmin brokerStatus and the console read);
    ``replication``: the replication status (ha/lag.py) to report as ``replication_entries``."""
    store, stats = ctx.store, ctx.stats
    put_tps, get_tps = stats.rates()
    now = int(time.time() * 1000)
    return {
        "brokerVersionDesc": "V4_9_7", "brokerVersion": str(CURRENT_VERSION), "ferrymqVersion": __version__,
        "msgPutTotalTodayNow": str(stats.messages_in), "msgGetTotalTodayNow": str(stats.messages_out),
        "msgPutTotalTodayMorning": "0", "msgGetTotalTodayMorning": "0",
        "msgPutTotalYesterdayMorning": "0", "msgGetTotalYesterdayMorning": "0",
        "putTps": f"{put_tps:.2f} {put_tps:.2f} {put_tps:.2f}",
        "getTransferedTps": f"{get_tps:.2f} {get_tps:.2f} {get_tps:.2f}",
        "bootTimestamp": str(stats.boot_timestamp_ms), "runtime": uptime_text(now - stats.boot_timestamp_ms),
        "commitLogMaxOffset": str(store.max_phy_offset), "commitLogMinOffset": str(store.min_phy_offset),
        "earliestMessageTimeStamp": str(await store.earliest_message_time()),
        "commitLogDiskRatio": f"{await disk_ratio(ctx.store_config.store_path_root_dir):.4f}",
        "sendThreadPoolQueueSize": "0", "pullThreadPoolQueueSize": "0", "dispatchBehindBytes": "0",
        "ferrymqHeldPulls": str(ctx.pull_waiters.held),  # long-polling pulls waiting for a message now
        **(replication_entries(replication) if replication is not None else {}),
    }


def replication_entries(status: dict) -> dict[str, str]:
    """Runtime-info entries for replication. ``slaveFallBehindMuch`` (a master) is RocketMQ's
    name for its CommitLog head minus the highest offset any slave acknowledged (its
    DefaultMessageStore.slaveFallBehindMuch). The ``ferrymqHa*`` keys are FerryMQ's own:
    ``ferrymqHaRole`` (brokerRole); on a master ``ferrymqHaSlaves``, a JSON list with one
    {"address", "ackedOffset", "lagBytes", "lagSeconds"} per connected slave (address: where
    the master sees it connect from; with failover also "inSync": whether the slave is in the
    controller's committed in-sync set, i.e. could be promoted); on a slave ``ferrymqHaMasterAddress``,
    ``ferrymqHaConnected`` and ``ferrymqHaLagBytes`` (behind the master's last transfer); with
    failover ``ferrymqHaEpoch`` and ``ferrymqHaIdentity`` (the brokerId the broker was configured
    with: which member of the group it is, while the id it registers under follows its role)."""
    out = {"ferrymqHaRole": status["role"]}
    if "epoch" in status:
        out["ferrymqHaEpoch"] = str(status["epoch"])
    if "identity" in status:
        out["ferrymqHaIdentity"] = str(status["identity"])
    if "slaves" in status:
        out["ferrymqHaSlaves"] = json.dumps(status["slaves"], separators=(",", ":"))
        if "ackedByAnySlave" in status:
            out["slaveFallBehindMuch"] = str(max(0, status["maxPhyOffset"] - status["ackedByAnySlave"]))
    if "connected" in status:  # a slave (with failover a broker may also keep its idle master side)
        out["ferrymqHaMasterAddress"] = status.get("masterAddress") or ""
        out["ferrymqHaConnected"] = "true" if status.get("connected") else "false"
        out["ferrymqHaLagBytes"] = str(max(0, status.get("masterOffset", 0) - status["maxPhyOffset"]))
    return out


def uptime_text(ms: int) -> str:
    seconds = ms // 1000
    return f"[ {seconds // 86400} days, {seconds // 3600 % 24} hours, {seconds // 60 % 60} minutes, {seconds % 60} seconds ]"


async def disk_ratio(path: str) -> float:
    """Used / total of the disk holding ``path`` (read in a thread)."""
    usage = await asyncio.to_thread(shutil.disk_usage, path)
    return usage.used / usage.total if usage.total else 0.0


def group_lags(store: AsyncMessageStore, offsets: ConsumerOffsetManager) -> list[tuple[str, str, int]]:
    """(group, topic, messages behind) for every group with committed offsets here."""
    out = []
    for key, queues in sorted(offsets.table.items()):
        topic, _, group = key.rpartition("@")
        behind = sum(max(0, store.max_offset(topic, q) - offset) for q, offset in queues.items())
        out.append((group, topic, behind))
    return out
