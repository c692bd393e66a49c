"""How a consumer group shares a topic's queues: RocketMQ's allocation strategies.

Pure functions of (group, my client id, every queue, every client id). Each member of a
group runs the same function over the same sorted inputs and takes its own share, so the
shares add up to every queue exactly once without any coordination. Java and Python
consumers share groups, so each function follows its Java counterpart
(``org.apache.rocketmq.client.consumer.rebalance.*``) result for result, quirks included.

The caller sorts: queues by (topic, brokerName, queueId) (MessageQueue's ordering) and
client ids as strings, exactly as RebalanceImpl does before calling the strategy.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ferrymq.common.protocol import MessageQueue

log = logging.getLogger(__name__)


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> None:
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")


def _member(group: str, current_cid: str, cid_all: Sequence[str]) -> bool:
    if current_cid in cid_all:
        return True
    log.info("[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s", group, current_cid, list(cid_all))
    return False


def allocate_averagely(group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                       cid_all: Sequence[str]) -> list[MessageQueue]:
    """Contiguous blocks; the first ``n % c`` members get one queue more (Java "AVG")."""
    _check(current_cid, mq_all, cid_all)
    if not _member(group, current_cid, cid_all):
        return []
    n, c = len(mq_all), len(cid_all)
    index = cid_all.index(current_cid)
    mod = n % c
    if n <= c:
        size = 1
    else:
        size = n // c + 1 if mod > 0 and index < mod else n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [mq_all[(start + i) % n] for i in range(count)]


def allocate_averagely_by_circle(group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                                 cid_all: Sequence[str]) -> list[MessageQueue]:
    """Round robin: queue i goes to member ``i % c`` (Java "AVG_BY_CIRCLE")."""
    _check(current_cid, mq_all, cid_all)
    if not _member(group, current_cid, cid_all):
        return []
    index, c = cid_all.index(current_cid), len(cid_all)
    return [mq_all[i] for i in range(index, len(mq_all)) if i % c == index]


def java_mq_string(mq: MessageQueue) -> str:
    """Java's ``MessageQueue.toString()``, the key consistent hashing routes by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def md5_hash(key: str) -> int:
    """ConsistentHashRouter's default MD5Hash: the first four digest bytes as an unsigned number."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def allocate_consistent_hash(group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                             cid_all: Sequence[str], virtual_nodes: int = 10) -> list[MessageQueue]:
    """A hash ring of ``virtual_nodes`` points per member ("<cid>-<i>"); each queue goes to the
    first point at or after its own hash, wrapping round (Java "CONSISTENT_HASH")."""
    _check(current_cid, mq_all, cid_all)
    if virtual_nodes < 0:
        raise ValueError(f"illegal virtualNodeCnt :{virtual_nodes}")
    if not _member(group, current_cid, cid_all):
        return []
    ring: dict[int, str] = {}
    replicas: dict[str, int] = {}
    for cid in cid_all:
        # A repeated client id gets further replica numbers, as ConsistentHashRouter.addNode does.
        existing = replicas.get(cid, 0)
        for i in range(virtual_nodes):
            ring[md5_hash(f"{cid}-{i + existing}")] = cid  # a TreeMap.put: a later equal hash wins
        replicas[cid] = existing + virtual_nodes
    if not ring:
        return []
    points = sorted(ring)
    result = []
    for mq in mq_all:
        at = bisect.bisect_left(points, md5_hash(java_mq_string(mq)))
        owner = ring[points[at % len(points)]]
        if owner == current_cid:
            result.append(mq)
    return result


def allocate_by_machine_room(group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                             cid_all: Sequence[str], consumer_idcs: set[str]) -> list[MessageQueue]:
    """Only queues of brokers named ``<room>@<name>`` whose room is in ``consumer_idcs``, shared
    in blocks with the remainder dealt one each to the first members (Java "MACHINE_ROOM")."""
    if current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    eligible = []
    for mq in mq_all:
        parts = mq.broker_name.split("@")
        if len(parts) == 2 and parts[0] in consumer_idcs:
            eligible.append(mq)
    c = len(cid_all)
    mod, rem = len(eligible) // c, len(eligible) % c
    result = eligible[mod * index: mod * index + mod]
    if rem > index:
        result.append(eligible[index + mod * c])
    return result


# ------------------------------------------------------------------ strategy objects


@dataclass(frozen=True)
class AllocateAveragely:
    name: str = "AVG"

    def allocate(self, group, current_cid, mq_all, cid_all):
        return allocate_averagely(group, current_cid, mq_all, cid_all)


@dataclass(frozen=True)
class AllocateAveragelyByCircle:
    name: str = "AVG_BY_CIRCLE"

    def allocate(self, group, current_cid, mq_all, cid_all):
        return allocate_averagely_by_circle(group, current_cid, mq_all, cid_all)


@dataclass(frozen=True)
class AllocateConsistentHash:
    virtual_nodes: int = 10
    name: str = "CONSISTENT_HASH"

    def allocate(self, group, current_cid, mq_all, cid_all):
        return allocate_consistent_hash(group, current_cid, mq_all, cid_all, self.virtual_nodes)


@dataclass(frozen=True)
class AllocateByConfig:
    """Always the configured queues, whoever else is in the group (Java "CONFIG")."""

    queues: tuple[MessageQueue, ...] = ()
    name: str = "CONFIG"

    def allocate(self, group, current_cid, mq_all, cid_all):
        return list(self.queues)


@dataclass(frozen=True)
class AllocateByMachineRoom:
    consumer_idcs: frozenset[str] = field(default_factory=frozenset)
    name: str = "MACHINE_ROOM"

    def allocate(self, group, current_cid, mq_all, cid_all):
        return allocate_by_machine_room(group, current_cid, mq_all, cid_all, set(self.consumer_idcs))


STRATEGIES = {"average": AllocateAveragely, "average-by-circle": AllocateAveragelyByCircle,
              "consistent-hash": AllocateConsistentHash, "config": AllocateByConfig,
              "machine-room": AllocateByMachineRoom}
