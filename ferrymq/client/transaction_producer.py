"""Transactional producer (RocketMQ's TransactionMQProducer): a message is stored as a half
message, invisible to consumers, while the local transaction runs; the producer then tells
the broker to commit (deliver) or roll back (drop) it. When that word is lost or the local
transaction could not tell (UNKNOW), the broker asks again later with CHECK_TRANSACTION_STATE
and the check listener answers from the application's own records.

    async def execute(msg, arg):            # runs once the half message is stored
        await db.insert_order(arg)           # plain functions run in a thread pool
        return LocalTransactionState.COMMIT_MESSAGE

    def check(msg):                          # the broker asks about an undecided one
        return LocalTransactionState.COMMIT_MESSAGE if db.has_order(msg.keys) else ...ROLLBACK_MESSAGE

    async with TransactionProducer("orders-tx", check_listener=check, namesrv_addr=...) as p:
        result = await p.send_in_transaction(Message("Orders", b"..."), execute, arg=order)

When the decision is made elsewhere (another process, later: a Spark sink commits the half
messages its tasks stored once the whole batch is written), the two halves of a transaction are
separate calls: :meth:`TransactionProducer.prepare` stores a half message and returns a
:class:`HalfMessage` (plain data, picklable), and :meth:`TransactionProducer.end` of any producer
of the same group decides it. FerryMQ commits a half message at most once, so ending one twice
(a retry, a check answer racing the decision) delivers it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence, Union

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.listener import call_user_code
from ferrymq.client.producer import Producer, SendResult, SendStatus
from ferrymq.common.transaction_batches import (END_TRANSACTIONS, SEND_HALF_MESSAGES, HalfRef, decode_failures,
                                                encode_halves)
from ferrymq.common.message import Message, MessageExt, Prop, SysFlag, decode_record
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import CheckTransactionStateHeader, EndTransactionHeader, EndTransactionsHeader

log = logging.getLogger(__name__)

HALF_BATCH_BYTES = 1 << 20  # per SEND_HALF_MESSAGES request (the broker's limit is 4 MiB a request)
END_MANY_CHUNK = 1_000  # half messages per END_TRANSACTIONS request (~60 KB of body)
CHUNKS_IN_FLIGHT = 4  # END_TRANSACTIONS requests at once to one broker
ENDS_IN_FLIGHT = 256  # END_TRANSACTION requests at once, where the broker has no END_TRANSACTIONS


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = SysFlag.TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = SysFlag.TRANSACTION_ROLLBACK_TYPE
    UNKNOW = SysFlag.TRANSACTION_NOT_TYPE  # sic, as RocketMQ spells it: the broker asks again later


State = Union[LocalTransactionState, Awaitable[LocalTransactionState]]
Execute = Callable[[Message, Any], State]
Check = Callable[[MessageExt], State]


@dataclass
class TransactionSendResult:
    send: SendResult
    local_state: LocalTransactionState


@dataclass(frozen=True)
class HalfMessage:
    """A stored half message, as END_TRANSACTION names it."""

    broker_name: str
    topic: str
    queue_id: int  # where the committed message goes
    queue_offset: int  # in the half queue (the transaction state table offset)
    commit_log_offset: int
    msg_id: str  # the client's unique id, also the transaction id

    @classmethod
    def of(cls, sent: SendResult, topic: str) -> "HalfMessage":
        return cls(broker_name=sent.message_queue.broker_name, topic=topic, queue_id=sent.message_queue.queue_id,
                   queue_offset=sent.queue_offset,
                   commit_log_offset=decode_offset_msg_id(sent.offset_msg_id.split(",")[0])[2], msg_id=sent.msg_id)


class TransactionProducer(Producer):
    def __init__(self, group: str, *, check_listener: Check, **kwargs) -> None:
        super().__init__(group, **kwargs)
        self.check_listener = check_listener
        self.instance.request_handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check
        self._closing = False
        self._without_half_batches = False  # a broker answered SEND_HALF_MESSAGES unknown (Apache's)

    async def start(self) -> "TransactionProducer":
        await super().start()
        with contextlib.suppress(MQClientError):  # name servers not there yet: the next refresh
            await self._known_to_every_broker()  # brokers check back with producers they know
        return self

    async def close(self) -> None:
        self._closing = True  # checks arriving now go unanswered: the broker asks again later
        await super().close()

    async def send_in_transaction(self, msg: Message, execute: Execute, arg: Any = None, *,
                                  timeout: float | None = None) -> TransactionSendResult:
        """Store ``msg`` as a half message, run ``execute(msg, arg)``, then commit or roll back
        as it says. An exception in ``execute`` leaves the transaction UNKNOW (checked back
        later); a failed send raises and ``execute`` does not run."""
        sent = await self._send_half(msg, None, timeout)
        if sent.status != SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE  # not safely stored: never deliver it
        else:
            state = await self._decide(execute, msg, arg)
        half = HalfMessage.of(sent, msg.topic)
        await self._end(await self.instance.find_broker_addr(half.broker_name, half.topic), state,
                        queue_offset=half.queue_offset, commit_log_offset=half.commit_log_offset,
                        msg_id=half.msg_id, transaction_id=half.msg_id, from_check=False)
        return TransactionSendResult(sent, state)

    async def prepare(self, msg: Message, *, queue: MessageQueue | None = None,
                      timeout: float | None = None) -> HalfMessage:
        """Store ``msg`` as a half message and leave it undecided (for :meth:`end`, here or in
        another producer of the group). ``queue``: where the committed message goes (by default
        the producer picks one, as a send does). Raises MQClientError unless it was stored
        safely (SEND_OK)."""
        sent = await self._send_half(msg, queue, timeout)
        if sent.status != SendStatus.SEND_OK:
            raise MQClientError(f"half message not stored safely: {sent.status.name}")
        return HalfMessage.of(sent, msg.topic)

    async def prepare_many(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                           timeout: float | None = None) -> list[HalfMessage]:
        """Store ``msgs`` (one topic) as half messages bound for ``queue`` (else a queue the
        producer picks per request) and leave them undecided, like :meth:`prepare` each: with
        FerryMQ's SEND_HALF_MESSAGES, a request per HALF_BATCH_BYTES of messages (a broker
        without it: a prepare each). Their HalfMessages, in order; raises MQClientError unless
        all were stored safely."""
        for m in msgs:
            m.properties[Prop.TRAN_MSG] = "true"
            m.properties[Prop.PGROUP] = self.group
        runs, run, size = [], [], 0
        for m in msgs:
            cost = len(m.body) + 512  # and its properties, at a guess
            if run and size + cost > HALF_BATCH_BYTES:
                runs.append(run)
                run, size = [], 0
            run.append(m)
            size += cost
        if run:
            runs.append(run)
        return [h for part in await asyncio.gather(*(self._prepare_run(r, queue, timeout) for r in runs)) for h in part]

    async def _prepare_run(self, msgs: list[Message], queue: MessageQueue | None,
                           timeout: float | None) -> list[HalfMessage]:
        topic, body = self._batch_body(msgs)
        if self._without_half_batches:  # Apache RocketMQ: one by one
            return list(await asyncio.gather(*(self.prepare(m, queue=queue, timeout=timeout) for m in msgs)))
        try:
            # retried as a send is (another queue unless one is given); a retry of a run that was
            # stored after all leaves halves no manifest names: checked back, committed at most once
            sent = await self._send_with_retry(
                topic, queue, lambda q: self._batch_request(topic, body, q, SEND_HALF_MESSAGES,
                                                            SysFlag.TRANSACTION_PREPARED_TYPE),
                timeout, ",".join(m.properties[Prop.UNIQ_KEY] for m in msgs))
        except MQBrokerError as e:
            if e.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            self._without_half_batches = True
            return list(await asyncio.gather(*(self.prepare(m, queue=queue, timeout=timeout) for m in msgs)))
        offset_ids = sent.offset_msg_id.split(",") if sent.status == SendStatus.SEND_OK else []
        if len(offset_ids) != len(msgs):
            raise MQClientError(f"half messages not stored safely: {sent.status.name}, {len(offset_ids)} ids "
                                f"for {len(msgs)} messages")
        mq = sent.message_queue
        return [HalfMessage(mq.broker_name, topic, mq.queue_id, sent.queue_offset + i,
                            decode_offset_msg_id(offset_id)[2], m.properties[Prop.UNIQ_KEY])
                for i, (m, offset_id) in enumerate(zip(msgs, offset_ids))]

    async def end(self, half: HalfMessage, state: LocalTransactionState) -> None:
        """Commit or roll back ``half``, waiting for the broker's answer (a failure raises
        MQBrokerError / MQClientError: ending it again is safe)."""
        addr = await self.instance.find_broker_addr(half.broker_name, half.topic)
        response = await self.instance.invoke_broker(addr, self._end_request(
            state, queue_offset=half.queue_offset, commit_log_offset=half.commit_log_offset, msg_id=half.msg_id,
            transaction_id=half.msg_id, from_check=False))
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)

    async def end_many(self, halves: list[HalfMessage], state: LocalTransactionState, *, ordered: bool = False) -> None:
        """Commit or roll back every one of ``halves``, END_MANY_CHUNK per FerryMQ
        END_TRANSACTIONS request (a broker without it: END_TRANSACTION each). A commit stores
        the message in its queue when the broker processes it, so with ``ordered`` each queue
        gets its messages in the order of ``halves`` (the chunks go one after another). Raises
        MQBrokerError naming the first half message not recorded: ending them again is safe."""
        by_broker: dict[str, list[HalfMessage]] = {}
        for h in halves:
            by_broker.setdefault(h.broker_name, []).append(h)
        await asyncio.gather(*(self._end_on_broker(chain, state, ordered) for chain in by_broker.values()))

    async def _end_on_broker(self, halves: list[HalfMessage], state: LocalTransactionState, ordered: bool) -> None:
        addr = await self.instance.find_broker_addr(halves[0].broker_name, halves[0].topic)
        chunks = [halves[i:i + END_MANY_CHUNK] for i in range(0, len(halves), END_MANY_CHUNK)]
        if ordered:
            done = True
            for part in chunks:
                done = await self._end_chunk(addr, part, state)
                if not done:
                    break
        else:
            limit = asyncio.Semaphore(CHUNKS_IN_FLIGHT)

            async def chunk(part: list[HalfMessage]) -> bool:
                async with limit:
                    return await self._end_chunk(addr, part, state)
            done = all(await asyncio.gather(*(chunk(part) for part in chunks)))
        if not done:  # the broker does not know END_TRANSACTIONS (it ended none of them)
            await self._end_one_by_one(halves, state, ordered)

    async def _end_chunk(self, addr: str, halves: list[HalfMessage], state: LocalTransactionState) -> bool:
        """END_TRANSACTIONS for ``halves``; False when the broker does not know the request."""
        request = RemotingCommand.request(
            END_TRANSACTIONS, EndTransactionsHeader(producer_group=self.group, commit_or_rollback=state.value).to_ext_fields(),
            body=encode_halves([HalfRef(h.queue_offset, h.commit_log_offset, h.msg_id) for h in halves]),
            serialize_type=self.config.serialize_type)
        response = await self.instance.invoke_broker(addr, request, self.send_timeout)
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return False
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        failed = decode_failures(response.body)
        if failed:
            first = failed[0]
            raise MQBrokerError(first.code, f"{len(failed)} of {len(halves)} transactions not recorded; the first, "
                                            f"{halves[first.index].msg_id}: {first.remark}")
        return True

    async def _end_one_by_one(self, halves: list[HalfMessage], state: LocalTransactionState, ordered: bool) -> None:
        """END_TRANSACTION per half message: each queue's in order with ``ordered`` (queues at
        once), else up to ENDS_IN_FLIGHT at once."""
        if not ordered:
            limit = asyncio.Semaphore(ENDS_IN_FLIGHT)

            async def one(h: HalfMessage) -> None:
                async with limit:
                    await self.end(h, state)
            await asyncio.gather(*(one(h) for h in halves))
            return
        chains: dict[tuple[str, int], list[HalfMessage]] = {}
        for h in halves:
            chains.setdefault((h.topic, h.queue_id), []).append(h)

        async def in_order(chain: list[HalfMessage]) -> None:
            for h in chain:
                await self.end(h, state)
        await asyncio.gather(*(in_order(chain) for chain in chains.values()))

    async def _send_half(self, msg: Message, queue: MessageQueue | None, timeout: float | None) -> SendResult:
        if msg.delay_level:
            raise MQClientError("a transactional message cannot be delayed")
        msg.properties[Prop.TRAN_MSG] = "true"
        msg.properties[Prop.PGROUP] = self.group
        self._prepare(msg)
        return await self._send_with_retry(
            msg.topic, queue, lambda mq: self._single_request(msg, mq, SysFlag.TRANSACTION_PREPARED_TYPE), timeout,
            msg.properties[Prop.UNIQ_KEY])

    async def _on_check(self, request: RemotingCommand, conn: Connection) -> None:
        """CHECK_TRANSACTION_STATE (oneway): ask the check listener, answer with END_TRANSACTION."""
        try:
            msg = decode_record(request.body or b"")[0]
        except (ValueError, IndexError) as e:
            log.warning("unreadable transaction check from %s: %s", conn.remote_address, e)
            return None
        if self._closing:
            log.info("transaction check of %s left for a later round: the producer is closing", msg.client_msg_id)
            return None
        if msg.properties.get(Prop.PGROUP) != self.group:
            log.warning("transaction check for group %s reached producer %s", msg.properties.get(Prop.PGROUP), self.group)
            return None
        check = CheckTransactionStateHeader.read(request)
        state = await self._decide(self.check_listener, msg)
        addr = self.instance.remoting.address_of(conn) or "%s:%d" % conn.remote_address
        try:
            await self._end(addr, state, queue_offset=msg.queue_offset, commit_log_offset=msg.commit_log_offset,
                            msg_id=msg.client_msg_id or check.msg_id, transaction_id=check.transaction_id,
                            from_check=True)
        except MQClientError as e:  # the broker asks again in its next round
            (log.info if self._closing else log.warning)("answering the transaction check of %s failed: %s",
                                                          msg.client_msg_id, e)
        return None

    @staticmethod
    async def _decide(fn: Callable, *args) -> LocalTransactionState:
        try:
            state = await call_user_code(fn, *args)
        except Exception:  # noqa: BLE001 - the application's error: the broker asks again later
            log.exception("local transaction callback failed; the transaction stays UNKNOW")
            return LocalTransactionState.UNKNOW
        if not isinstance(state, LocalTransactionState):
            log.warning("local transaction callback returned %r, not a LocalTransactionState; UNKNOW", state)
            return LocalTransactionState.UNKNOW
        return state

    def _end_request(self, state: LocalTransactionState, *, queue_offset: int, commit_log_offset: int,
                     msg_id: str, transaction_id: str, from_check: bool) -> RemotingCommand:
        header = EndTransactionHeader(
            producer_group=self.group, tran_state_table_offset=queue_offset, commit_log_offset=commit_log_offset,
            commit_or_rollback=state.value, from_transaction_check=from_check, msg_id=msg_id,
            transaction_id=transaction_id)
        return RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields(),
                                       serialize_type=self.config.serialize_type)

    async def _end(self, addr: str, state: LocalTransactionState, *, queue_offset: int, commit_log_offset: int,
                   msg_id: str, transaction_id: str, from_check: bool) -> None:
        """END_TRANSACTION oneway, as the official clients send it."""
        await self.instance.invoke_broker_oneway(addr, self._end_request(
            state, queue_offset=queue_offset, commit_log_offset=commit_log_offset, msg_id=msg_id,
            transaction_id=transaction_id, from_check=from_check))
