"""Message trace records for gRPC traffic, written by the broker (docs/trace.md#rocketmq-5-grpc-clients).

RocketMQ 5 gRPC clients write no trace records. With ``traceTopicEnable`` the gRPC endpoint
writes them in their place, in the remoting clients' format (common/trace_data.py), to
``msgTraceTopicName``: a Pub per stored SendMessage entry, a SubBefore per message a
ReceiveMessage delivers, a SubAfter when that delivery ends (AckMessage: success; a push
consumer's ChangeInvisibleDuration, its nack, or ForwardMessageToDeadLetterQueue: failure) and
an EndTransaction per EndTransaction. Each trace message carries RECORDED_BY_PROPERTY=broker and
has the gRPC client's address as its born host.

Off the request's path: a call only puts its records on a bounded queue; one task takes them in
batches and stores them through the broker's send path. A full queue drops the record, counted
(``dropped``) and logged; a failed write is logged. Neither touches the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable

from ferrymq.common.message import Prop, encode_properties
from ferrymq.common.tasks import within
from ferrymq.common.trace_data import (CONSUME_RETURN_TYPES, END_TRANSACTION, RECORDED_BY_BROKER, RECORDED_BY_PROPERTY,
                                       SUB_AFTER, SUB_BEFORE, TraceEvent, encode_trace_data)
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.request_headers import SendMessageHeader

log = logging.getLogger(__name__)

Address = tuple[str, int]
# stores one request on the broker's send path, as if it came from ``Address``
TraceSend = Callable[[RemotingCommand, Address], Awaitable[RemotingCommand]]

TRACE_PRODUCER_GROUP = "FERRYMQ_GRPC_TRACE_PRODUCER"
MAX_PENDING = 20_000  # records waiting to be written; more are dropped
BATCH = 64  # records (contexts) per trace message at most, as the clients' traceMsgBatchNum
MAX_KEYS_BYTES = 16 * 1024  # of the trace message's KEYS (a property: properties are bounded)
MAX_OPEN_DELIVERIES = 65_536  # deliveries awaiting their end; the oldest are forgotten beyond
DROP_LOG_EVERY = 1_000
FAILED = CONSUME_RETURN_TYPES.index("FAILED")
SUCCESS = CONSUME_RETURN_TYPES.index("SUCCESS")


def now_ms() -> int:
    return int(time.time() * 1000)


# (group, topic, queue id, queue offset, delivery attempt): one delivery, whatever its receipt
# handle becomes through ChangeInvisibleDuration
DeliveryKey = tuple[str, str, int, int, int]


@dataclass(frozen=True)
class Delivery:
    request_id: str
    msg_id: str
    keys: str | None
    started_ms: int


class GrpcTrace:
    def __init__(self, *, topic: str, region: Callable[[], str], send: TraceSend,
                 max_pending: int = MAX_PENDING) -> None:
        self.topic = topic
        self.region = region
        self.send = send
        self.dropped = 0  # records a full queue turned away
        self.written = 0  # records stored
        self.failed = 0  # records whose write the send path refused
        self._queue: asyncio.Queue[tuple[Address, TraceEvent, str]] = asyncio.Queue(max_pending)
        self._open: OrderedDict[DeliveryKey, Delivery] = OrderedDict()
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ what the calls report

    def published(self, event: TraceEvent, client: Address, keys: list[str]) -> None:
        """A stored SendMessage entry: its Pub record (``keys``: the message's own keys)."""
        self._offer(client, event, keys)

    def delivered(self, key: DeliveryKey, *, msg_id: str, keys: list[str], retry_times: int,
                  region: str | None, client: Address) -> None:
        """A message a ReceiveMessage hands out: its SubBefore, and the delivery kept open."""
        group = key[0]
        delivery = Delivery(uuid.uuid4().hex.upper(), msg_id, " ".join(keys) or None, now_ms())
        self._open[key] = delivery
        self._open.move_to_end(key)
        while len(self._open) > MAX_OPEN_DELIVERIES:
            self._open.popitem(last=False)
        self._offer(client, TraceEvent(SUB_BEFORE, msg_id, timestamp=delivery.started_ms,
                                       region_id=region or self.region(), group=group,
                                       request_id=delivery.request_id, retry_times=retry_times,
                                       keys=delivery.keys), keys)

    def ended(self, key: DeliveryKey, *, success: bool, client: Address) -> None:
        """The delivery ``key`` is over: its SubAfter (none for a delivery not open: ended
        already, forgotten, or handed out before the broker started)."""
        delivery = self._open.pop(key, None)
        if delivery is None:
            return
        at = now_ms()
        self._offer(client, TraceEvent(SUB_AFTER, delivery.msg_id, request_id=delivery.request_id,
                                       cost_ms=max(0, at - delivery.started_ms), success=success,
                                       keys=delivery.keys, context_code=SUCCESS if success else FAILED,
                                       timestamp=at, group=key[0]),
                    delivery.keys.split(" ") if delivery.keys else [])

    def transaction_ended(self, event: TraceEvent, client: Address) -> None:
        assert event.type == END_TRANSACTION
        self._offer(client, event, [])

    def _offer(self, client: Address, event: TraceEvent, keys: list[str]) -> None:
        if self._task is None:
            return  # not started, or stopped
        try:
            self._queue.put_nowait((client, event, " ".join([event.msg_id, *keys])))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped % DROP_LOG_EVERY == 1:
                log.warning("gRPC message trace: %d trace record(s) dropped so far, %d waiting to be written "
                            "to %s (the queue is full)", self.dropped, self._queue.qsize(), self.topic)

    # ------------------------------------------------------------------ writing

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="grpc-trace")

    async def stop(self, timeout: float = 3.0) -> None:
        """Writes what is queued (for up to ``timeout`` seconds), then stops."""
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await within(self._queue.join(), timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < BATCH * 4 and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                by_client: dict[Address, list[tuple[TraceEvent, str]]] = {}
                for client, event, keys in batch:
                    by_client.setdefault(client, []).append((event, keys))
                for client, records in by_client.items():
                    for chunk in _chunks(records):
                        await self._write(client, chunk)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a trace write never stops the writer
                log.exception("gRPC message trace: writing %d record(s) to %s failed", len(batch), self.topic)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, client: Address, records: list[tuple[TraceEvent, str]]) -> None:
        body = encode_trace_data(e for e, _ in records).encode("utf-8")
        keys = " ".join(dict.fromkeys(k for _, ks in records for k in ks.split(" ") if k))
        header = SendMessageHeader(producer_group=TRACE_PRODUCER_GROUP, topic=self.topic, queue_id=0,
                                   born_timestamp=now_ms(),
                                   properties=encode_properties({Prop.KEYS: keys,
                                                                 RECORDED_BY_PROPERTY: RECORDED_BY_BROKER}))
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(v2=True), body)
        request.received_at = time.monotonic()
        response = await self.send(request, client)
        if response.code == ResponseCode.SUCCESS:
            self.written += len(records)
        else:
            self.failed += len(records)
            log.warning("gRPC message trace: %d record(s) not stored in %s: %s (code %s)", len(records),
                        self.topic, response.remark, response.code)


def _chunks(records: list[tuple[TraceEvent, str]]):
    """At most BATCH records and about MAX_KEYS_BYTES of keys per trace message."""
    chunk: list[tuple[TraceEvent, str]] = []
    size = 0
    for record in records:
        if chunk and (len(chunk) >= BATCH or size + len(record[1]) > MAX_KEYS_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += len(record[1])
    if chunk:
        yield chunk
