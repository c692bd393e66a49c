"""Transactional messages as RocketMQ 4.x keeps them (TransactionalMessageService).

A send with ``TRAN_MSG=true`` stores a *half* message: the message re-addressed to
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and queue in REAL_TOPIC / REAL_QID,
so no consumer sees it. The producer then runs its local transaction and sends
END_TRANSACTION naming the half message (its CommitLog offset and half-queue offset):

- commit: the message is stored again under its real topic and queue (transaction type
  COMMIT, TRAN_MSG removed) and becomes visible;
- rollback: nothing is delivered;
- either way an *op* record (``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body the
  half message's queue offset) marks the half message as decided.

A half message is committed at most once (Apache commits it again on a second END_TRANSACTION
COMMIT, e.g. a check answer racing the producer's own commit, or a retried one): before storing
the commit record, the broker looks for one with the half message's UNIQ_KEY in the index
(``topic#UNIQ_KEY``, where the commit record is stored: its topic, or the timer or schedule
topic it waits in) and answers SUCCESS without storing another; two commits of one message in
flight at once share one put. Without the index (``messageIndexEnable=false``) a second commit
is stored again, as in Apache.

Half messages left undecided are checked back: every ``transactionCheckInterval`` the
checker walks the half queue from its saved offset. A decided message is passed; one
younger than ``transactionTimeOut`` (or its own CHECK_IMMUNITY_TIME_IN_SECONDS) stops the
walk until the next round; one checked ``transactionCheckMax`` times already is discarded
into ``TRANS_CHECK_MAX_TIME_TOPIC``; any other is appended again to the half queue with
TRANSACTION_CHECK_TIMES + 1 and CHECK_TRANSACTION_STATE (39) goes to one online producer
of its group, which answers with END_TRANSACTION for that copy. Both walk positions are
offsets of the consumer group ``CID_RMQ_SYS_TRANS`` (consumerOffset.json), so a restarted
broker resumes where it stopped and still knows every decision recorded in the op queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass

from ferrymq.broker.context import BrokerContext
from ferrymq.broker.schedule import divert_to_schedule, is_delayable
from ferrymq.broker.timer_send import TimerRefusal, asks_for_timer, divert_to_timer
from ferrymq.common.message import MessageExt, Prop, SysFlag, decode_record
from ferrymq.common.message_id import offset_msg_id
from ferrymq.common.protocol import Perm
from ferrymq.common.transaction_batches import HalfRef
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import CheckTransactionStateHeader
from ferrymq.store.results import AppendResult, GetStatus

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # the walk positions, as RocketMQ names its consumer group
REMOVE_TAG = "d"
BATCH = 32
COMMIT_LOOKUP_MARGIN_MS = 86_400_000


def is_transactional(msg: MessageExt) -> bool:
    """A half message to be: TRAN_MSG=true, unless it is a consumer's send-back of one."""
    return msg.properties.get(Prop.TRAN_MSG, "").lower() == "true" and not (
        msg.reconsume_times > 0 and msg.delay_level > 0)


def divert_to_half(msg: MessageExt) -> None:
    """Re-address a transactional message to the half queue, remembering where it goes."""
    msg.properties[Prop.REAL_TOPIC] = msg.topic
    msg.properties[Prop.REAL_QID] = str(msg.queue_id)
    msg.sys_flag = (msg.sys_flag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_NOT_TYPE
    msg.topic, msg.queue_id = HALF_TOPIC, 0


@dataclass(frozen=True)
class EndTransaction:
    """END_TRANSACTION's header (EndTransactionRequestHeader)."""

    producer_group: str
    tran_state_table_offset: int  # the half message's queue offset
    commit_log_offset: int
    commit_or_rollback: int  # SysFlag.TRANSACTION_COMMIT_TYPE / ROLLBACK_TYPE / NOT_TYPE (unknown)
    from_transaction_check: bool
    msg_id: str
    transaction_id: str


class TransactionService:
    def __init__(self, ctx: BrokerContext, delay_levels: int) -> None:
        """``delay_levels``: how many delay levels there are (a committed message may carry one)."""
        self.ctx = ctx
        self.delay_levels = delay_levels
        self.checks_sent = 0
        self.discarded = 0
        self._committing: dict[str, asyncio.Future[tuple[int, str | None]]] = {}  # UNIQ_KEY -> its commit

    def ensure_topics(self) -> None:
        for topic in (HALF_TOPIC, OP_TOPIC):
            self.ctx.topics.ensure(topic, 1, Perm.READ_WRITE)

    # ------------------------------------------------------------------ END_TRANSACTION(S)

    async def end(self, request: EndTransaction) -> tuple[int, str | None]:
        """Commit or roll back a half message: (response code, remark)."""
        if request.commit_or_rollback not in (SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
            # The producer does not know yet: the check-back will ask again.
            log.info("transaction %s of %s left undecided by the producer (%s)", request.transaction_id,
                     request.producer_group, "check" if request.from_transaction_check else "send")
            return ResponseCode.SUCCESS, None
        ref = HalfRef(request.tran_state_table_offset, request.commit_log_offset, request.msg_id)
        return (await self.end_many(request.producer_group, request.commit_or_rollback, [ref]))[0]

    async def end_many(self, group: str, kind: int, refs: list[HalfRef]) -> list[tuple[int, str | None]]:
        """Commit or roll back each of ``refs`` (half messages of producer group ``group``), in
        their order: the half messages read together, the commit records stored with one write,
        the op records with another (END_TRANSACTIONS; END_TRANSACTION is one of them). Each
        gets its (response code, remark); a half message whose commit failed is left undecided
        (the check-back asks again)."""
        if kind not in (SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
            return [(ResponseCode.SUCCESS, None)] * len(refs)
        outcomes: list[tuple[int, str | None]] = [(ResponseCode.SUCCESS, None)] * len(refs)
        records = await self.ctx.store.look_messages([r.commit_log_offset for r in refs])
        found: list[tuple[int, MessageExt]] = []
        for i, (ref, record) in enumerate(zip(refs, records)):
            half, error = _half_message(record, group, ref.tran_state_table_offset)
            if half is None:
                outcomes[i] = (ResponseCode.SYSTEM_ERROR, error)
            else:
                found.append((i, half))
        if kind == SysFlag.TRANSACTION_COMMIT_TYPE and found:
            committed = await self._commit_once([half for _, half in found])
            for (i, _), outcome in zip(found, committed):
                outcomes[i] = outcome
            found = [(i, half) for i, half in found if outcomes[i][0] == ResponseCode.SUCCESS]
        if found and not await self._mark_decided([half.queue_offset for _, half in found]):
            for i, _ in found:
                outcomes[i] = (ResponseCode.SYSTEM_ERROR, "recording the transaction's outcome failed")
        return outcomes

    async def _commit_once(self, halves: list[MessageExt]) -> list[tuple[int, str | None]]:
        """Store the commit record of each of ``halves`` unless one is stored already; a commit
        of one while another commit of it is in flight waits for that one's outcome (the puts
        run on even if the caller goes away)."""
        loop = asyncio.get_running_loop()
        waits, mine = [], []
        for half in halves:
            key = half.properties.get(Prop.UNIQ_KEY) or f"@{half.commit_log_offset}"
            if key not in self._committing:
                self._committing[key] = loop.create_future()
                mine.append((key, half))
            waits.append(self._committing[key])
        if mine:
            asyncio.ensure_future(self._commit([half for _, half in mine])).add_done_callback(
                lambda task: self._settle([key for key, _ in mine], task))
        return list(await asyncio.shield(asyncio.gather(*waits)))

    def _settle(self, keys: list[str], task: asyncio.Future) -> None:
        """Hand the outcomes of a run of commits to everyone waiting for them."""
        if task.cancelled() or task.exception() is not None:
            error = "cancelled" if task.cancelled() else repr(task.exception())
            outcomes = [(ResponseCode.SYSTEM_ERROR, f"committing failed: {error}")] * len(keys)
            if not task.cancelled():
                log.error("committing %d transactions failed", len(keys), exc_info=task.exception())
        else:
            outcomes = task.result()
        for key, outcome in zip(keys, outcomes):
            self._committing.pop(key).set_result(outcome)

    async def _commit(self, halves: list[MessageExt]) -> list[tuple[int, str | None]]:
        outcomes: list[tuple[int, str | None]] = [(ResponseCode.SUCCESS, None)] * len(halves)
        pending: list[tuple[int, MessageExt]] = []
        for i, half in enumerate(halves):
            committed, refusal = self._committed(half)
            if refusal is not None:  # Apache: the commit's put fails, the half waits for the check-back
                outcomes[i] = (refusal.code, refusal.remark)
            else:
                pending.append((i, committed))
        stored = await self._stored_before([committed for _, committed in pending])
        for (i, committed), before in zip(pending, stored):
            if before:
                log.info("transaction %s of %s committed again: delivered once, not stored twice",
                         committed.properties.get(Prop.UNIQ_KEY), halves[i].properties.get(Prop.PGROUP))
        puts = [(i, committed) for (i, committed), before in zip(pending, stored) if not before]
        for (i, _), result in zip(puts, await self._put_all([committed for _, committed in puts])):
            if not result.ok:
                outcomes[i] = (ResponseCode.SYSTEM_ERROR,
                               f"storing the committed message failed: {result.remark or result.status.name}")
            else:
                self.ctx.stats.record_put(halves[i].properties.get(Prop.REAL_TOPIC, ""), 1, result.wrote_bytes)
        return outcomes

    async def _stored_before(self, committed: list[MessageExt]) -> list[bool]:
        """For each, whether a commit record of the same message (its UNIQ_KEY, under the topic
        it is stored in) is in the index already."""
        now_ms = int(time.time() * 1000)
        keyed = [(i, m.properties[Prop.UNIQ_KEY]) for i, m in enumerate(committed) if m.properties.get(Prop.UNIQ_KEY)]
        # From a day before the producer made it (its clock may be off), to now and a minute.
        found = await self.ctx.store.query_messages([
            (committed[i].topic, uniq, 32, max(0, committed[i].born_timestamp - COMMIT_LOOKUP_MARGIN_MS), now_ms + 60_000)
            for i, uniq in keyed])
        before = [False] * len(committed)
        for (i, uniq), result in zip(keyed, found):
            before[i] = any(_is_commit_of(record, uniq) for record in result.records)
        return before

    def _committed(self, half: MessageExt) -> tuple[MessageExt, TimerRefusal | None]:
        """The commit record of ``half``: a timer or a delay level it asked for counts from now."""
        props = {k: v for k, v in half.properties.items() if k not in (Prop.REAL_TOPIC, Prop.REAL_QID, Prop.TRAN_MSG)}
        msg = MessageExt(topic=half.properties.get(Prop.REAL_TOPIC, ""), body=half.body, flag=half.flag,
                         properties=props, queue_id=int(half.properties.get(Prop.REAL_QID, "0")),
                         sys_flag=(half.sys_flag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_COMMIT_TYPE,
                         born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=self.ctx.store_host,
                         reconsume_times=half.reconsume_times)
        if asks_for_timer(msg):
            return msg, divert_to_timer(msg, self.ctx.store_config, int(time.time() * 1000))
        if is_delayable(msg):
            divert_to_schedule(msg, self.delay_levels)
        return msg, None

    async def _mark_decided(self, half_offsets: list[int]) -> bool:
        now_ms = int(time.time() * 1000)
        ops = [MessageExt(topic=OP_TOPIC, body=str(offset).encode(), properties={Prop.TAGS: REMOVE_TAG}, queue_id=0,
                          born_timestamp=now_ms, born_host=self.ctx.store_host, store_host=self.ctx.store_host)
               for offset in half_offsets]
        return all(result.ok for result in await self._put_all(ops))

    async def _put_all(self, msgs: list[MessageExt]) -> list[AppendResult]:
        """One message as a send is stored; several with one write (``put_group``)."""
        if len(msgs) == 1:
            return [await self.ctx.store.put_message(msgs[0])]
        return await self.ctx.store.put_group(msgs) if msgs else []

    # ------------------------------------------------------------------ check-back

    async def run(self) -> None:
        """The checker: one round every transactionCheckInterval, for the broker's lifetime."""
        while True:
            await asyncio.sleep(self.ctx.config.transaction_check_interval / 1000)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a round must never end the checker: half messages would wait forever
                log.exception("transaction check round failed")

    async def check_once(self) -> None:
        store, offsets = self.ctx.store, self.ctx.offsets
        half_offset = max(offsets.query(CHECK_GROUP, HALF_TOPIC, 0), store.min_offset(HALF_TOPIC, 0), 0)
        op_offset = max(offsets.query(CHECK_GROUP, OP_TOPIC, 0), store.min_offset(OP_TOPIC, 0), 0)
        decided = await self._decided(op_offset)  # half offsets, in op-queue order
        decided_set = set(decided)
        end = store.max_offset(HALF_TOPIC, 0)
        position = half_offset
        while position < end:
            if position in decided_set:
                position += 1
                continue
            result = await store.get_messages(CHECK_GROUP, HALF_TOPIC, 0, position, 1)
            if not result.records:
                if result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE):
                    break
                position = max(result.next_begin_offset, position + 1)  # removed by retention
                continue
            half = decode_record(result.records[0])[0]
            if not await self._check(half):
                break  # too young: so is everything after it
            position += 1
        offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, position)
        # the leading op records that name only passed half messages are done with
        done = next((i for i, half_of_op in enumerate(decided) if half_of_op >= position), len(decided))
        offsets.commit(CHECK_GROUP, OP_TOPIC, 0, op_offset + done)

    async def _decided(self, op_offset: int) -> list[int]:
        """The half offsets the op queue names from ``op_offset`` on (-1 for an unreadable one,
        which keeps the op offsets aligned and decides nothing)."""
        decided: list[int] = []
        offset, end = op_offset, self.ctx.store.max_offset(OP_TOPIC, 0)
        while offset < end:
            result = await self.ctx.store.get_messages(CHECK_GROUP, OP_TOPIC, 0, offset, BATCH)
            if not result.records:
                break
            for record in result.records:
                try:
                    decided.append(int(decode_record(record)[0].body))
                except ValueError:
                    decided.append(-1)
            offset = result.next_begin_offset
        return decided

    async def _check(self, half: MessageExt) -> bool:
        """Handle one undecided half message; False if it is too young to check yet."""
        config = self.ctx.config
        times = _int(half.properties.get(Prop.TRANSACTION_CHECK_TIMES), 0)
        if times >= config.transaction_check_max:
            await self._discard(half, times)
            return True
        immunity_s = _int(half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS), -1)
        immunity_ms = immunity_s * 1000 if immunity_s >= 0 else config.transaction_time_out
        if int(time.time() * 1000) - half.born_timestamp < immunity_ms:
            return False
        copy = MessageExt(topic=HALF_TOPIC, body=half.body, flag=half.flag,
                          properties={**half.properties, Prop.TRANSACTION_CHECK_TIMES: str(times + 1)},
                          queue_id=0, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
                          born_host=half.born_host, store_host=self.ctx.store_host,
                          reconsume_times=half.reconsume_times)
        result = await self.ctx.store.put_message(copy)
        if not result.ok:
            log.warning("transaction check: putting back half message %s failed: %s", half.client_msg_id,
                        result.remark or result.status.name)
            return False  # retried next round, from this message
        record = await self.ctx.store.look_message(result.wrote_offset)
        if record is not None:
            await self._ask_producer(decode_record(record)[0], record)
        return True

    async def _discard(self, half: MessageExt, times: int) -> None:
        self.ctx.topics.ensure(CHECK_MAX_TOPIC, 1, Perm.READ_WRITE)
        out = MessageExt(topic=CHECK_MAX_TOPIC, body=half.body, flag=half.flag, properties=dict(half.properties),
                         queue_id=0, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
                         born_host=half.born_host, store_host=self.ctx.store_host)
        await self.ctx.store.put_message(out)
        self.discarded += 1
        log.warning("transaction %s of %s: no decision after %d checks; discarded into %s", half.client_msg_id,
                    half.properties.get(Prop.PGROUP), times, CHECK_MAX_TOPIC)

    async def _ask_producer(self, half: MessageExt, record: bytes) -> None:
        """CHECK_TRANSACTION_STATE to one online producer of the group (oneway; the answer
        is an END_TRANSACTION), the stored copy as its body."""
        group = half.properties.get(Prop.PGROUP, "")
        channels = list(self.ctx.consumers.producers.get(group, {}).values())
        if not channels:
            log.info("transaction %s: no producer of group %s online to check with", half.client_msg_id, group)
            return
        channel = random.choice(channels)
        host, port = self.ctx.store_host
        offset_id = offset_msg_id(host, port, half.commit_log_offset)
        request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, CheckTransactionStateHeader(
            tran_state_table_offset=half.queue_offset, commit_log_offset=half.commit_log_offset,
            msg_id=half.client_msg_id or offset_id, transaction_id=half.client_msg_id or offset_id,
            offset_msg_id=offset_id).to_ext_fields(), body=record)
        try:
            await channel.connection.invoke_oneway(request)
            self.checks_sent += 1
        except RemotingError as e:
            log.info("transaction %s: asking %s failed: %s", half.client_msg_id, channel.client_id, e)


def _half_message(record: bytes | None, group: str, queue_offset: int) -> tuple[MessageExt | None, str | None]:
    """The half message END_TRANSACTION names, or why it cannot be decided (Apache's remarks)."""
    try:
        half = decode_record(record)[0] if record else None
    except ValueError:
        half = None
    if half is None or half.topic != HALF_TOPIC:
        return None, "Find prepared transaction message failed"
    if half.properties.get(Prop.PGROUP) != group:
        return None, "The producer group wrong"
    if half.queue_offset != queue_offset:
        return None, "The transaction state table offset wrong"
    return half, None


def _is_commit_of(record: bytes, uniq: str) -> bool:
    try:
        m = decode_record(record)[0]
    except ValueError:
        return False
    return m.properties.get(Prop.UNIQ_KEY) == uniq and m.sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT_TYPE


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
