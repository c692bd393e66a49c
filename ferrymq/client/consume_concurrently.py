"""Concurrent consumption: pulled messages go to a bounded pool of listener calls in any order.

Each pull's messages are cut into batches (consume_message_batch_max_size) and queued; a
fixed number of workers (consume_thread_max) take batches and call the listener. The
queue's committed offset only moves past a message once it and everything before it are
done (see ProcessQueue.remove). A failed batch is sent back to the broker (retry topic,
delay levels, then DLQ); a message whose send-back fails too is kept and consumed again
locally a little later, so nothing is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from ferrymq.client.listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, Listener, call_user_code
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.push_config import MessageModel, PushConsumerConfig
from ferrymq.client.send_back import SendBack
from ferrymq.common.message import MessageExt, Prop
from ferrymq.common.protocol import MessageQueue, retry_topic
from ferrymq.common.tasks import InFlight, TaskSet

log = logging.getLogger(__name__)


async def call_listener(listener: Listener, executor: ThreadPoolExecutor, msgs: list[MessageExt], context) -> object:
    """Run a sync listener in the pool, await an async one."""
    return await call_user_code(listener, msgs, context, executor=executor)


def prepare_for_listener(msgs: list[MessageExt], group: str) -> None:
    """Retry-topic messages show their original topic (RocketMQ's resetRetryAndNamespace)."""
    retry = retry_topic(group)
    now = str(int(time.time() * 1000))
    for m in msgs:
        original = m.properties.get(Prop.RETRY_TOPIC)
        if original and m.topic == retry:
            m.topic = original
        m.properties[Prop.CONSUME_START_TIME] = now


@dataclass(eq=False)
class ConsumeRequest:
    msgs: list[MessageExt]
    pq: ProcessQueue
    mq: MessageQueue
    started: float = 0.0  # monotonic, when the listener got them
    expired: bool = False  # sent back by the consume timeout: the listener's late result is ignored


EXPIRED_DELAY_LEVEL = 3  # RocketMQ's cleanExpiredMsg sends back with delay level 3


class ConcurrentConsumeService:
    orderly = False

    def __init__(self, group: str, config: PushConsumerConfig, listener: Listener, *, send_back: SendBack,
                 offset_store: OffsetStore, on_consumed: Callable[[int], None]) -> None:
        """``on_consumed(n)``: n messages finished (consumed, or handed back for a retry)."""
        self.group = group
        self.listener = listener
        self.config = config
        self.send_back = send_back
        self.offset_store = offset_store
        self.on_consumed = on_consumed
        self._queue: asyncio.Queue[ConsumeRequest] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(self.config.consume_thread_max, thread_name_prefix=f"consume-{group}")
        self._workers = TaskSet(f"consumer {group}", log)
        self._later = TaskSet(f"consumer {group}", log)  # re-submissions after a delay
        self._in_flight = InFlight()
        self._consuming: set[ConsumeRequest] = set()

    def start(self) -> None:
        for i in range(self.config.consume_thread_max):
            self._workers.spawn(self._work(), name=f"consume-worker-{i}")
        timeout = self.config.consume_timeout * 60
        self._workers.every(min(timeout, 60.0) / 2, self.expire_stuck, "consume-timeout")

    async def expire_stuck(self) -> int:
        """Send back the messages of listener calls running longer than consume_timeout, so that
        one stuck call does not hold its queue's offset (and the group's progress) forever."""
        deadline = time.monotonic() - self.config.consume_timeout * 60
        expired = 0
        for request in [r for r in self._consuming if r.started < deadline and not r.expired]:
            request.expired = True
            log.warning("consume of %d message(s) of %s exceeded consumeTimeout (%g min); sending them back",
                        len(request.msgs), request.mq, self.config.consume_timeout)
            await self._process_result(request, ConsumeConcurrentlyStatus.RECONSUME_LATER,
                                       ConsumeConcurrentlyContext(request.mq, EXPIRED_DELAY_LEVEL))
            expired += len(request.msgs)
        return expired

    async def shutdown(self) -> None:
        """Stop taking work; wait (bounded) for listener calls in progress, then stop the workers."""
        await self._later.close()
        await self._in_flight.wait_idle(self.config.await_termination)
        await self._workers.close()
        self._executor.shutdown(wait=False)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool = True) -> None:
        size = max(1, self.config.consume_message_batch_max_size)
        for i in range(0, len(msgs), size):
            self._queue.put_nowait(ConsumeRequest(msgs[i:i + size], pq, mq))

    def _submit_later(self, request: ConsumeRequest, delay: float) -> None:
        async def later() -> None:
            await asyncio.sleep(delay)
            self.submit(request.msgs, request.pq, request.mq)

        self._later.spawn(later())

    async def _work(self) -> None:
        while True:
            request = await self._queue.get()
            with self._in_flight:
                try:
                    await self._consume(request)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("consuming %d message(s) of %s failed unexpectedly", len(request.msgs), request.mq)

    async def _consume(self, request: ConsumeRequest) -> None:
        if request.pq.dropped:
            return
        group = self.group
        prepare_for_listener(request.msgs, group)
        context = ConsumeConcurrentlyContext(request.mq)
        request.started = time.monotonic()
        self._consuming.add(request)
        try:
            status = await call_listener(self.listener, self._executor, request.msgs, context)
        except Exception:
            log.warning("listener of group %s failed on %d message(s) of %s; they will be retried", group,
                        len(request.msgs), request.mq, exc_info=True)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        finally:
            self._consuming.discard(request)
        if request.expired:
            return  # already sent back by the consume timeout
        if request.pq.dropped:
            # The queue moved to another member meanwhile; it starts from the committed offset.
            log.debug("%s was dropped during consumption; result of %d message(s) not committed", request.mq,
                      len(request.msgs))
            return
        await self._process_result(request, status, context)

    async def _process_result(self, request: ConsumeRequest, status, context: ConsumeConcurrentlyContext) -> None:
        msgs, pq, mq = request.msgs, request.pq, request.mq
        done = msgs
        if status in (ConsumeConcurrentlyStatus.RECONSUME_LATER, ConsumeConcurrentlyStatus.RECONSUME_LATER.value):
            if self.config.message_model is MessageModel.BROADCASTING:
                for m in msgs:
                    log.warning("BROADCASTING, the message %s consume failed, drop it", m.client_msg_id)
            else:
                kept = []
                for m in msgs:
                    if not await self.send_back.send_message_back(m, context.delay_level_when_next_consume, mq.broker_name):
                        m.reconsume_times += 1
                        kept.append(m)
                if kept:
                    # Not acknowledged anywhere: keep them (they hold the offset back) and retry here.
                    kept_ids = {id(m) for m in kept}
                    done = [m for m in msgs if id(m) not in kept_ids]
                    self._submit_later(ConsumeRequest(kept, pq, mq), self.config.retry_local_delay)
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(mq, offset, increase_only=True)
        self.on_consumed(len(done))
