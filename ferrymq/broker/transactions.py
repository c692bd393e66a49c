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
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import CheckTransactionStateHeader
from ferrymq.store.results import GetStatus

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

    # ------------------------------------------------------------------ END_TRANSACTION

    async def end(self, request: EndTransaction) -> tuple[int, str | None]:
        """Commit or roll back a half message: (response code, remark)."""
        kind = request.commit_or_rollback
        if kind not in (SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
            # The producer does not know yet: the check-back will ask again.
            log.info("transaction %s of %s left undecided by the producer (%s)", request.transaction_id,
                     request.producer_group, "check" if request.from_transaction_check else "send")
            return ResponseCode.SUCCESS, None
        half, error = await self._half_message(request)
        if half is None:
            return ResponseCode.SYSTEM_ERROR, error
        if kind == SysFlag.TRANSACTION_COMMIT_TYPE:
            code, remark = await self._commit_once(half)
            if code != ResponseCode.SUCCESS:
                return code, remark
        if not await self._mark_decided(half.queue_offset):
            return ResponseCode.SYSTEM_ERROR, "recording the transaction's outcome failed"
        return ResponseCode.SUCCESS, None

    async def _half_message(self, request: EndTransaction) -> tuple[MessageExt | None, str | None]:
        record = await self.ctx.store.look_message(request.commit_log_offset)
        try:
            half = decode_record(record)[0] if record else None
        except ValueError:
            half = None
        if half is None or half.topic != HALF_TOPIC:
            return None, "Find prepared transaction message failed"
        if half.properties.get(Prop.PGROUP) != request.producer_group:
            return None, "The producer group wrong"
        if half.queue_offset != request.tran_state_table_offset:
            return None, "The transaction state table offset wrong"
        return half, None

    async def _commit_once(self, half: MessageExt) -> tuple[int, str | None]:
        """Store the commit record of ``half`` unless one is stored already; a second commit of
        it while the first is in flight waits for that one's outcome (the put runs on even if
        the first caller goes away)."""
        key = half.properties.get(Prop.UNIQ_KEY) or f"@{half.commit_log_offset}"
        commit = self._committing.get(key)
        if commit is None:
            commit = self._committing[key] = asyncio.ensure_future(self._commit(half))
            commit.add_done_callback(lambda _: self._committing.pop(key, None))
        return await asyncio.shield(commit)

    async def _commit(self, half: MessageExt) -> tuple[int, str | None]:
        committed, refusal = self._committed(half)
        if refusal is not None:  # Apache: the commit's put fails, the half waits for the check-back
            return refusal.code, refusal.remark
        if await self._stored_before(committed):
            log.info("transaction %s of %s committed again: delivered once, not stored twice",
                     committed.properties.get(Prop.UNIQ_KEY), half.properties.get(Prop.PGROUP))
            return ResponseCode.SUCCESS, None
        result = await self.ctx.store.put_message(committed)
        if not result.ok:
            return ResponseCode.SYSTEM_ERROR, f"storing the committed message failed: {result.remark or result.status.name}"
        self.ctx.stats.record_put(half.properties.get(Prop.REAL_TOPIC, ""), 1, result.wrote_bytes)
        return ResponseCode.SUCCESS, None

    async def _stored_before(self, committed: MessageExt) -> bool:
        """A commit record of the same message (its UNIQ_KEY, under the topic it is stored in)
        is in the index."""
        uniq = committed.properties.get(Prop.UNIQ_KEY)
        if not uniq:
            return False
        # From a day before the producer made it (its clock may be off), to now and a minute.
        begin = max(0, committed.born_timestamp - COMMIT_LOOKUP_MARGIN_MS)
        found = await self.ctx.store.query_message(committed.topic, uniq, 32, begin,
                                                   int(time.time() * 1000) + 60_000)
        for record in found.records:
            try:
                m = decode_record(record)[0]
            except ValueError:
                continue
            if (m.properties.get(Prop.UNIQ_KEY) == uniq
                    and m.sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT_TYPE):
                return True
        return False

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

    async def _mark_decided(self, half_offset: int) -> bool:
        op = MessageExt(topic=OP_TOPIC, body=str(half_offset).encode(), properties={Prop.TAGS: REMOVE_TAG},
                        queue_id=0, born_timestamp=int(time.time() * 1000), born_host=self.ctx.store_host,
                        store_host=self.ctx.store_host)
        return (await self.ctx.store.put_message(op)).ok

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


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
