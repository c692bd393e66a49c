"""How the sink writes a batch exactly once: RocketMQ transactional messages, decided by Spark's
commit of the batch (async functions over FerryMQ's clients; the Spark classes are in sink.py).

1. Each task stores its rows as **half messages** (invisible to consumers), each carrying
   ``FERRYMQ_SPARK_TXN = transactionalId|run|batch|partition|attempt``, then a **manifest** of
   them (where each half is, in row order) as ordinary messages in the commit topic, keyed
   ``<transactionalId>/manifest/<run>/<batch>/<partition>/<attempt>#<part>``. It hands the
   halves and the manifest's keys to the driver.
2. The driver's commit of batch B (a streaming batch id, or a batch write's own id) first looks
   for B's **marker** (key ``<transactionalId>/batch/<B>`` in the commit topic):

   * none: it writes one naming the manifests of the tasks Spark chose, reads the markers back
     and, if its own is the first (no other run raced it), commits the halves in order:
     partitions in order, rows in each as the task wrote them. Rows with one sharding key
     therefore reach their queue in the order of the DataFrame's partition;
   * one (an earlier run of the query committed B and stopped before Spark recorded it, so
     Spark runs B again): that run's halves are committed from its manifests (FerryMQ commits
     a half message at most once, so those already committed stay single) and this run's are
     rolled back.
3. An abort rolls the halves back. Halves no commit names (a failed task attempt, a run that
   stopped before its commit) are checked back by the broker; a producer of the group answers
   from the marker: commit if the marker names its manifest, roll back if the marker names
   others or if it belongs to an older run without a marker, ask again later if it belongs to
   the running one. With no producer left to ask, the broker discards them after
   ``transactionCheckMax`` checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import SendStatus
from ferrymq.client.transaction_producer import HalfMessage, LocalTransactionState, TransactionProducer
from ferrymq.common.message import Message, MessageExt

TXN_PROPERTY = "FERRYMQ_SPARK_TXN"
HALVES_PER_MANIFEST_PART = 20_000  # ~1.5 MB of JSON: well under the 4 MiB message limit
COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)


@dataclass(frozen=True)
class TaskTag:
    transactional_id: str
    run: str  # one run of the query (a start of it): a fresh id each time
    batch: str
    partition: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.transactional_id}|{self.run}|{self.batch}|{self.partition}|{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> "TaskTag":
        tid, run, batch, partition, attempt = text.split("|")
        return cls(tid, run, batch, int(partition), int(attempt))

    @property
    def manifest_key(self) -> str:
        return f"{self.transactional_id}/manifest/{self.run}/{self.batch}/{self.partition}/{self.attempt}"


@dataclass
class TaskOutcome:
    """What a task hands the driver (Spark's WriterCommitMessage)."""

    tag: TaskTag
    halves: list[HalfMessage]
    manifest_parts: list[str] = field(default_factory=list)
    ordered: bool = False  # some row chose its queue (a sharding key): its queue gets them in order


def marker_key(transactional_id: str, batch: str) -> str:
    return f"{transactional_id}/batch/{batch}"


# ---------------------------------------------------------------------------------- manifests


def encode_halves(halves: list[HalfMessage]) -> bytes:
    brokers = sorted({h.broker_name for h in halves})
    topics = sorted({h.topic for h in halves})
    b, t = {n: i for i, n in enumerate(brokers)}, {n: i for i, n in enumerate(topics)}
    return json.dumps({"brokers": brokers, "topics": topics,
                       "halves": [[b[h.broker_name], t[h.topic], h.queue_id, h.queue_offset, h.commit_log_offset,
                                   h.msg_id] for h in halves]}, separators=(",", ":")).encode()


def decode_halves(body: bytes) -> list[HalfMessage]:
    doc = json.loads(body)
    brokers, topics = doc["brokers"], doc["topics"]
    return [HalfMessage(brokers[b], topics[t], qid, q, c, m) for b, t, qid, q, c, m in doc["halves"]]


async def write_manifest(producer: TransactionProducer, commit_topic: str, tag: TaskTag,
                         halves: list[HalfMessage]) -> list[str]:
    """The task's halves as manifest messages (parts of HALVES_PER_MANIFEST_PART); their keys."""
    keys = []
    for part, start in enumerate(range(0, max(len(halves), 1), HALVES_PER_MANIFEST_PART)):
        key = f"{tag.manifest_key}#{part}"
        await _send(producer, commit_topic, key, encode_halves(halves[start:start + HALVES_PER_MANIFEST_PART]))
        keys.append(key)
    return keys


async def _send(producer: TransactionProducer, topic: str, key: str, body: bytes) -> None:
    msg = Message(topic, body)
    msg.keys = key
    sent = await producer.send(msg)
    if sent.status != SendStatus.SEND_OK:
        raise RuntimeError(f"writing {key} to {topic}: {sent.status.name} (not stored safely)")


async def read_manifest(admin: AdminClient, commit_topic: str, part_keys: list[str]) -> list[HalfMessage]:
    halves: list[HalfMessage] = []
    for key in part_keys:
        found = await admin.query_messages(commit_topic, key)
        if not found:
            raise RuntimeError(f"manifest {key} is not in {commit_topic}: its halves cannot be committed")
        halves += decode_halves(found[0].body)
    return halves


# ---------------------------------------------------------------------------------- markers


async def find_marker(admin: AdminClient, commit_topic: str, transactional_id: str, batch: str) -> dict | None:
    """The first marker stored for the batch (a later one lost a race and decides nothing)."""
    found = await admin.query_messages(commit_topic, marker_key(transactional_id, batch))
    return json.loads(found[0].body) if found else None


# ---------------------------------------------------------------------------------- decisions


async def commit_batch(producer: TransactionProducer, admin: AdminClient, commit_topic: str,
                       transactional_id: str, run: str, batch: str, outcomes: list[TaskOutcome]) -> str:
    """Commit ``outcomes`` as batch ``batch`` unless the batch was committed before; what was
    done ("committed", or "committed earlier by run X": this run's halves rolled back)."""
    outcomes = sorted(outcomes, key=lambda o: o.tag.partition)
    mine = {"run": run, "manifests": [k for o in outcomes for k in o.manifest_parts]}
    marker = await find_marker(admin, commit_topic, transactional_id, batch)
    if marker is None:
        await _send(producer, commit_topic, marker_key(transactional_id, batch), json.dumps(mine).encode())
        marker = await find_marker(admin, commit_topic, transactional_id, batch)
    ordered = any(o.ordered for o in outcomes)
    if marker == mine:
        await producer.end_many([h for o in outcomes for h in o.halves], COMMIT, ordered=ordered)
        return "committed"
    # The earlier run's rows, in its order (whether it chose queues is not recorded: keep order).
    await producer.end_many(await read_manifest(admin, commit_topic, marker["manifests"]), COMMIT, ordered=True)
    await producer.end_many([h for o in outcomes for h in o.halves], ROLLBACK)
    return f"committed earlier by run {marker['run']}"


async def decide_check(admin: AdminClient, commit_topic: str, current_run: str, half: MessageExt) -> LocalTransactionState:
    """The answer to the broker's check of one of the sink's half messages."""
    text = half.properties.get(TXN_PROPERTY)
    if not text:
        return UNKNOW  # not the sink's: another producer of the group decides it
    tag = TaskTag.parse(text)
    marker = await find_marker(admin, commit_topic, tag.transactional_id, tag.batch)
    if marker is not None:
        named = any(k.split("#")[0] == tag.manifest_key for k in marker["manifests"])
        return COMMIT if named else ROLLBACK
    return UNKNOW if tag.run == current_run else ROLLBACK
