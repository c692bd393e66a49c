"""The broker-side calls the operator makes, each a thin use of ferrymq's one AdminClient.

This module is a port, not a second admin client: it opens an ``AdminClient`` against the
name servers of one Broker resource and turns its answers into the small shapes the pure
decision functions take (``topics.ObservedTopic``, consumeEnable per broker, lag, the
replication lag of each master's slaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.common.protocol import Perm, SubscriptionGroupConfig
from ferrymq.remoting.tls import ClientTls

from ferrymq_operator.topics import DesiredTopic, ObservedTopic


@contextlib.asynccontextmanager
async def connect(namesrv_addr: str, timeout: float, credentials: Credentials | None = None,
                  tls: ClientTls | None = None):
    config = ClientConfig(namesrv_addr=namesrv_addr, api_timeout=timeout, credentials=credentials, tls=tls)
    admin = AdminClient(namesrv_addr=namesrv_addr, config=config)
    try:
        yield admin
    finally:
        await admin.close()


async def brokers(admin: AdminClient, cluster: str) -> dict[str, str]:
    """brokerName -> master address, for the brokers of one Broker resource (its cluster)."""
    info = await admin.cluster_info()
    if cluster not in info.cluster_addr_table:
        return {}
    return await admin.master_addrs(cluster)


# ---------------------------------------------------------------------------- accounts

# The refusals that mean "this broker's ACL does not hold this account (or this secret) yet".
_NOT_LOADED = ("No acl config for", "Check signature failed")


async def brokers_refusing(namesrv_addr: str, timeout: float, credentials: Credentials, tls: ClientTls | None,
                           addrs: dict[str, str]) -> dict[str, str]:
    """brokerName -> why, for the brokers that do not accept ``credentials`` yet: a request
    signed with them (GET_BROKER_RUNTIME_INFO, which any account may make) is refused as an
    unknown account or a wrong signature, or the broker cannot be reached. Any other answer
    means the account is loaded."""
    refusing: dict[str, str] = {}
    async with connect(namesrv_addr, timeout, credentials, tls) as admin:
        for name, addr in addrs.items():
            try:
                await admin.broker_runtime_info(addr)
            except MQBrokerError as e:
                if any(words in (e.remark or "") for words in _NOT_LOADED):
                    refusing[name] = e.remark or str(e)
            except MQClientError as e:
                refusing[name] = str(e)
    return refusing


# ---------------------------------------------------------------------------- topics

async def observe_topic(admin: AdminClient, addrs: dict[str, str], topic: str) -> dict[str, ObservedTopic | None]:
    out: dict[str, ObservedTopic | None] = {}
    for name, addr in addrs.items():
        config = (await admin.topic_configs(addr)).get(topic)
        out[name] = None if config is None else ObservedTopic(config.read_queue_nums, config.write_queue_nums,
                                                               config.perm, config.order)
    return out


async def apply_topic(admin: AdminClient, addr: str, topic: DesiredTopic) -> None:
    await admin.create_topic(topic.name, read_queues=topic.read_queues, write_queues=topic.write_queues,
                             perm=topic.perm, order=topic.order, broker_addr=addr)


async def delete_topic(admin: AdminClient, topic: str, cluster: str) -> None:
    await admin.delete_topic(topic, cluster=cluster)


# ---------------------------------------------------------------------------- groups

async def observe_group(admin: AdminClient, addrs: dict[str, str], group: str) -> dict[str, SubscriptionGroupConfig | None]:
    return {name: (await admin.group_configs(addr)).get(group) for name, addr in addrs.items()}


async def apply_group(admin: AdminClient, addr: str, config: SubscriptionGroupConfig) -> None:
    await admin.update_group(config, broker_addr=addr)


async def delete_group(admin: AdminClient, group: str, cluster: str) -> None:
    # Offsets are kept: a group re-created under the same name resumes where it stopped.
    await admin.delete_group(group, cluster=cluster)


@dataclass(frozen=True)
class QueueLag:
    broker: str
    topic: str
    messages: int
    bytes: int | None  # RocketMQ's consume stats carry no byte counts; None until they do


async def group_lag(admin: AdminClient, group: str, cluster: str) -> list[QueueLag]:
    """Per queue: the messages the group is behind (broker max offset - committed offset)."""
    stats = await admin.consume_stats(group, cluster=cluster)
    return [QueueLag(mq.broker_name, mq.topic, w.lag, None) for mq, w in stats.offset_table.items()]


async def reset_to_latest(admin: AdminClient, group: str, topics: list[str]) -> None:
    """Move the group's offsets to the end of every queue of ``topics`` (skip the backlog)."""
    for topic in topics:
        await admin.reset_offset(group, topic, timestamp=None)


async def set_writable(admin: AdminClient, addrs: dict[str, str], names: list[str], writable: bool) -> None:
    """Take write permission from the named brokers (read-only: producers move to the others,
    the drain before a restart or a removal) or give it back; names not registered are skipped."""
    perm = Perm.READ_WRITE if writable else Perm.READ
    for name in names:
        if name in addrs:
            await admin.update_broker_config(addrs[name], {"brokerPermission": str(perm)})


async def backlog(admin: AdminClient, cluster: str, broker_names: list[str]) -> dict[str, int]:
    """brokerName -> unconsumed messages summed over every group known on those brokers."""
    out = {name: 0 for name in broker_names}
    addrs = await admin.master_addrs(cluster)
    groups: set[str] = set()
    for name in broker_names:
        if name in addrs:
            groups |= set(await admin.group_configs(addrs[name]))
    for group in sorted(groups):
        for q in await group_lag(admin, group, cluster):
            if q.broker in out:
                out[q.broker] += q.messages
    return out


# ---------------------------------------------------------------------------- replication

@dataclass(frozen=True)
class SlaveLag:
    """One slave connected to a master, as the master's runtime info reports it."""

    address: str      # host:port the master sees the slave connect from
    bytes: int        # the master's CommitLog bytes the slave has not acknowledged
    seconds: float    # since the master first had a byte the slave has not acknowledged
    in_sync: bool | None = None  # failover: in the controller's in-sync set (promotable); None: not reported


async def slave_lags(admin: AdminClient, master_addr: str) -> list[SlaveLag]:
    """The slaves connected to the master at ``master_addr`` with their lag (runtime info key
    ferrymqHaSlaves); [] from a broker that reports none. Raises MQClientError when the master
    cannot be asked."""
    return slave_lags_of(await admin.broker_runtime_info(master_addr), master_addr)


async def replication_lags(admin: AdminClient, cluster: str, broker_names: list[str]) -> dict[str, list[SlaveLag] | None]:
    """brokerName -> the lag of each slave connected to its master, None for a group whose
    master is not registered or cannot be asked (lag unknown, not an error)."""
    try:
        addrs = await brokers(admin, cluster)
    except MQClientError:
        return {name: None for name in broker_names}

    async def one(name: str) -> list[SlaveLag] | None:
        if name not in addrs:
            return None
        try:
            return await slave_lags(admin, addrs[name])
        except MQClientError:
            return None

    return dict(zip(broker_names, await asyncio.gather(*(one(name) for name in broker_names))))


@dataclass(frozen=True)
class ObservedBroker:
    """One broker registered under a group's brokerName, as the name servers list it and as its
    own runtime info describes it (role and the rest None when it could not be asked)."""

    address: str                    # host:port it registered
    broker_id: int                  # the id it is registered under now (0: the group's master)
    reachable: bool
    role: str | None = None         # ferrymqHaRole: ASYNC_MASTER, SYNC_MASTER or SLAVE
    identity: int | None = None     # ferrymqHaIdentity (failover): its configured brokerId, i.e. which pod
    epoch: int | None = None        # ferrymqHaEpoch (failover)
    slaves: list[SlaveLag] | None = None  # as a master: its slaves' links (ferrymqHaSlaves)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


async def observe_broker(admin: AdminClient, address: str, broker_id: int) -> ObservedBroker:
    """What the broker at ``address`` says about its role; unreachable (role unknown) when it
    cannot be asked."""
    try:
        info = await admin.broker_runtime_info(address)
    except MQClientError:
        return ObservedBroker(address, broker_id, False)
    try:
        links = slave_lags_of(info, address)
    except MQClientError:
        links = None
    return ObservedBroker(address, broker_id, True, info.get("ferrymqHaRole") or None,
                          _int_or_none(info.get("ferrymqHaIdentity")), _int_or_none(info.get("ferrymqHaEpoch")),
                          links)


def slave_lags_of(info: dict[str, str], address: str) -> list[SlaveLag]:
    raw = info.get("ferrymqHaSlaves")
    if not raw:
        return []
    try:
        return [SlaveLag(str(s["address"]), int(s["lagBytes"]), float(s.get("lagSeconds", 0.0)),
                         None if s.get("inSync") is None else bool(s["inSync"])) for s in json.loads(raw)]
    except (ValueError, KeyError, TypeError) as e:
        raise MQClientError(f"{address} reported ferrymqHaSlaves the operator cannot read: {e}") from e


async def group_members(admin: AdminClient, cluster: str, broker_names: list[str]) -> dict[str, list[ObservedBroker] | None]:
    """brokerName -> every broker registered under it with what it says about its role (the
    name servers' cluster info, then each broker's runtime info, asked concurrently); None for
    a group nobody registered, or when the name servers cannot be asked."""
    try:
        info = await admin.cluster_info()
    except MQClientError:
        return {name: None for name in broker_names}
    table = info.broker_addr_table if cluster in info.cluster_addr_table else {}

    async def one(name: str) -> list[ObservedBroker] | None:
        data = table.get(name)
        if data is None or not data.broker_addrs:
            return None
        return list(await asyncio.gather(*(observe_broker(admin, addr, int(bid))
                                           for bid, addr in sorted(data.broker_addrs.items(), key=lambda kv: int(kv[0])))))

    return dict(zip(broker_names, await asyncio.gather(*(one(name) for name in broker_names))))
