"""Producer: send one message or a batch, sync (await), async (callback) or oneway.

Queue selection is round-robin over the topic's writable queues; a failed attempt is
retried on the next queue, preferably on another broker (RocketMQ's retryTimesWhenSendFailed).
A send to a queue the caller chose is retried only when its broker answered SYSTEM_BUSY
(admission control: nothing was stored), after a short backoff, as RocketMQ 5's clients
back off on TOO_MANY_REQUESTS.
A send that finds no writable queue for its topic, or whose broker cannot be reached or takes
no writes now (SERVICE_NOT_AVAILABLE: a fenced master, one stepping down) with no other broker
to try (the master killed or cut off and a slave not yet promoted, a broker restarting),
waits for the route to change until its send timeout instead of failing at once: it asks the
name server again with a growing back-off, waking early when any route is read meanwhile.
Such rounds do not count against retryTimesWhenSendFailed; after the timeout the error names
the topic (docs/failover.md).
Each message gets a client-generated UNIQ_KEY, the id users see as ``msg_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ferrymq.client.broker_faults import BrokerFaults
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import BrokerUnreachableError, MQBrokerError, MQClientError, NoRouteError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.request_reply import PendingRequests, is_reply
from ferrymq.common.message import Message, MessageExt, Prop, encode_batch_body, encode_properties
from ferrymq.common.message_id import new_uniq_key
from ferrymq.common.protocol import DEFAULT_TOPIC, MessageQueue, TopicRouteData
from ferrymq.common.recall_handle import INVALID_HANDLE, RecallHandle
from ferrymq.common.tasks import within
from ferrymq.common.validators import validate_topic
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import RecallMessageHeader, RecallMessageResponseHeader, SendMessageResponseHeader
from ferrymq.remoting.request_headers import SendMessageHeader

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
BUSY_BACKOFF = 0.05  # s before a pinned send retries a busy broker; doubles per attempt
# s before a send with no usable route asks the name server again; doubles up to the maximum
ROUTE_BACKOFF, ROUTE_BACKOFF_MAX = 0.05, 1.0

# Codes after which a sync send tries another queue (RocketMQ's retryResponseCodes).
# SYSTEM_BUSY too: a broker shedding load is avoided for a while and another one tried.
RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
               ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
               ResponseCode.SYSTEM_BUSY}
# Refusals meaning "this broker takes no writes now": a master that fenced itself or steps down,
# a slave the route still names as master. The route is about to change: the send waits for it.
WRITE_REFUSALS = {ResponseCode.SERVICE_NOT_AVAILABLE}
DEFAULT_MAX_ASYNC_IN_FLIGHT = 65535  # RocketMQ's clientAsyncSemaphoreValue


class SendStatus(enum.Enum):
    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE


@dataclass
class SendResult:
    status: SendStatus
    msg_id: str  # the client's UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # broker address + physical offset (comma-joined for a batch)
    message_queue: MessageQueue
    queue_offset: int
    recall_handle: str | None = None  # a timer message's: give it to ``Producer.recall``

    def to_dict(self) -> dict:
        return {"status": self.status.name, "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
                "topic": self.message_queue.topic, "brokerName": self.message_queue.broker_name,
                "queueId": self.message_queue.queue_id, "queueOffset": self.queue_offset}


class Producer:
    def __init__(self, group: str = "DEFAULT_PRODUCER", *, namesrv_addr: str | None = None,
                 config: ClientConfig | None = None, send_timeout: float = 3.0, retry_times: int = 2,
                 default_topic_queue_nums: int = 4, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 send_latency_fault_enable: bool = True, max_async_in_flight: int = DEFAULT_MAX_ASYNC_IN_FLIGHT) -> None:
        self.group = group
        self.config = config or ClientConfig()
        if namesrv_addr:
            self.config.namesrv_addr = namesrv_addr
        self.instance = ClientInstance(self.config)
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_message_size = max_message_size
        self._counter = itertools.count()
        self.faults = BrokerFaults(send_latency_fault_enable)
        # topic -> (route object, its publish queues): rebuilt only when the route is replaced.
        self._queue_cache: dict[str, tuple[TopicRouteData, list[MessageQueue]]] = {}
        self._pending: set[asyncio.Task] = set()
        self.max_async_in_flight = max_async_in_flight
        self._requests = PendingRequests()
        self.instance.request_handlers[RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] = self._requests.on_push

    async def start(self) -> "Producer":
        self.instance.producer_groups.add(self.group)
        await self.instance.start()
        return self

    async def close(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.instance.unregister(producer_group=self.group)
        await self.instance.close()

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ sending

    async def send(self, msg: Message, *, queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer, retrying on another queue if it fails."""
        self._prepare(msg)
        return await self._send_with_retry(msg.topic, queue, lambda mq: self._single_request(msg, mq), timeout,
                                           msg.properties[Prop.UNIQ_KEY])

    def send_async(self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
                   *, timeout: float | None = None) -> asyncio.Task:
        """Start a send; the task's result (and the callback) carry the SendResult or error.
        At most ``max_async_in_flight`` run at once: beyond that the send is not started and
        fails at once ("too many async sends in flight"), so a caller that never awaits
        cannot pile up memory without bound."""
        refused = len(self._pending) >= self.max_async_in_flight
        if refused:
            coro = self._refuse_async(MQClientError(
                f"too many async sends in flight ({self.max_async_in_flight}): invokeAsync too fast, "
                "await some before sending more"))
        else:
            coro = self.send(msg, timeout=timeout)
        task = asyncio.create_task(coro)
        if not refused:
            self._pending.add(task)

        def done(t: asyncio.Task) -> None:
            self._pending.discard(t)
            if callback:
                error = t.exception() if not t.cancelled() else asyncio.CancelledError()
                callback(None if error else t.result(), error)

        task.add_done_callback(done)
        return task

    async def request(self, msg: Message, *, timeout: float = 3.0) -> MessageExt:
        """Send a request message and wait for its reply (a responder sends
        ``create_reply(request, body)``); MQClientError when none came within ``timeout``."""
        deadline = time.monotonic() + timeout
        reply = self._requests.prepare(msg, self.config.client_id, timeout)
        try:
            # The reply is pushed by the broker of the reply topic, which may be another one.
            await self._publish_route(msg.topic)
            await self._known_to_every_broker()
            await self.send(msg, timeout=max(0.001, deadline - time.monotonic()))
            return await within(reply, max(0.001, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise MQClientError(f"no reply to the request to {msg.topic} within {timeout:g} s") from None
        finally:
            reply.cancel()

    async def recall(self, topic: str, recall_handle: str, *, broker_name: str | None = None,
                     timeout: float | None = None) -> str:
        """Recall a timer message that has not fired (RocketMQ 5.3.2's ``recallMessage``): the id of
        the recalled message, or MQBrokerError with the broker's code. The broker is the one the
        handle names (``broker_name`` for a handle that names none: the broker then judges it)."""
        handle = RecallHandle.decode(recall_handle)
        name = broker_name or (handle.broker_name if handle else None)
        if name is None:
            raise MQClientError(INVALID_HANDLE)
        addr = await self.instance.find_broker_addr(name, topic)
        request = RemotingCommand.request(RequestCode.RECALL_MESSAGE, RecallMessageHeader(
            producer_group=self.group, topic=topic, recall_handle=recall_handle).to_ext_fields())
        response = await self.instance.invoke_broker(addr, request, timeout or self.send_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        return RecallMessageResponseHeader.read(response).msg_id or ""

    async def _known_to_every_broker(self) -> None:
        """Heartbeat to every broker of the default topic too, not only those sent to (as Java's
        producer does), so a broker that must call this producer back (a reply, a transaction
        check) knows its connection; the default topic's route is kept fresh from then on."""
        if DEFAULT_TOPIC not in self.instance.watched_topics:
            self.instance.watched_topics.add(DEFAULT_TOPIC)
            await self.instance.default_topic_route()
        await self.instance.send_heartbeats()

    @staticmethod
    async def _refuse_async(error: MQClientError) -> SendResult:
        raise error

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for any answer (no delivery guarantee)."""
        self._prepare(msg)
        route = await self._publish_route(msg.topic)
        mq = queue or self._select_queue(route, msg.topic, None)
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        await self.instance.invoke_broker_oneway(addr, self._single_request(msg, mq))

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send several messages of one topic as one request; they get consecutive offsets."""
        topic, body = self._batch_body(msgs)
        return await self._send_with_retry(topic, queue, lambda mq: self._batch_request(topic, body, mq), timeout,
                                           ",".join(m.properties[Prop.UNIQ_KEY] for m in msgs))

    # ------------------------------------------------------------------ internals

    def _batch_body(self, msgs: Sequence[Message]) -> tuple[str, bytes]:
        """A batch's topic and body, its messages checked and given their ids."""
        if not msgs:
            raise MQClientError("a batch needs at least one message")
        topic = msgs[0].topic
        for m in msgs:
            if m.topic != topic:
                raise MQClientError("all messages of a batch must have the same topic")
            if m.delay_level:
                raise MQClientError("a batch cannot carry delayed messages")
            self._prepare(m)
        return topic, encode_batch_body(msgs)

    def _prepare(self, msg: Message) -> None:
        error = validate_topic(msg.topic)
        if error:
            raise MQClientError(f"invalid topic {msg.topic!r}: {error}")
        if len(msg.body) == 0:
            raise MQClientError("message body is empty")
        if len(msg.body) > self.max_message_size:
            raise MQClientError(f"message body is {len(msg.body)} bytes; the limit is {self.max_message_size}")
        if Prop.UNIQ_KEY not in msg.properties:
            msg.properties[Prop.UNIQ_KEY] = new_uniq_key()

    def _header(self, topic: str, mq: MessageQueue, properties: str, *, batch: bool, flag: int = 0,
                sys_flag: int = 0) -> dict:
        return SendMessageHeader(self.group, topic, mq.queue_id, DEFAULT_TOPIC, self.default_topic_queue_nums,
                                 sys_flag=sys_flag, born_timestamp=int(time.time() * 1000), flag=flag,
                                 properties=properties, batch=batch, broker_name=mq.broker_name).to_fields()

    def _single_request(self, msg: Message, mq: MessageQueue, sys_flag: int = 0) -> RemotingCommand:
        header = self._header(msg.topic, mq, encode_properties(msg.properties), batch=False, flag=msg.flag,
                              sys_flag=sys_flag)
        code = RequestCode.SEND_REPLY_MESSAGE_V2 if is_reply(msg) else RequestCode.SEND_MESSAGE_V2
        return RemotingCommand.request(code, header, msg.body, serialize_type=self.config.serialize_type)

    def _batch_request(self, topic: str, body: bytes, mq: MessageQueue, code: int = RequestCode.SEND_BATCH_MESSAGE,
                       sys_flag: int = 0) -> RemotingCommand:
        return RemotingCommand.request(code, self._header(topic, mq, "", batch=True, sys_flag=sys_flag), body,
                                       serialize_type=self.config.serialize_type)

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to (the writable queues of its route)."""
        return list(self._publish_queues(await self._publish_route(topic), topic))

    def _publish_queues(self, route: TopicRouteData, topic: str) -> list[MessageQueue]:
        cached = self._queue_cache.get(topic)
        if cached is None or cached[0] is not route:
            cached = self._queue_cache[topic] = (route, route.publish_queues(topic))
        return cached[1]

    async def _publish_route(self, topic: str) -> TopicRouteData:
        route = await self.instance.route(topic)
        if route is None or not self._publish_queues(route, topic):
            # Unknown topic: send through the default topic's brokers; they create it.
            default = await self.instance.default_topic_route()
            if default is None or not default.publish_queues(DEFAULT_TOPIC):
                raise NoRouteError(f"no route for topic {topic} and no default topic {DEFAULT_TOPIC} to create it from")
            default = TopicRouteData.from_dict(default.to_dict())  # the cached route stays intact
            for q in default.queue_datas:
                q.read_queue_nums = q.write_queue_nums = min(self.default_topic_queue_nums, q.write_queue_nums)
            for b in default.broker_datas:
                self.instance.broker_addrs[b.broker_name] = dict(b.broker_addrs)
            return default
        return route

    def _select_queue(self, route: TopicRouteData, topic: str, avoid_broker: str | None) -> MessageQueue:
        """Round robin over the writable queues, skipping the broker that just failed and
        brokers that failed recently; if all are avoided, the one that recovers first."""
        queues = self._publish_queues(route, topic)
        if not queues:
            raise NoRouteError(f"topic {topic} has no writable queue")
        start = next(self._counter)
        ordered = [queues[(start + i) % len(queues)] for i in range(len(queues))]
        for mq in ordered:
            if mq.broker_name != avoid_broker and self.faults.available(mq.broker_name):
                return mq
        for mq in ordered:
            if mq.broker_name != avoid_broker:
                return mq
        return ordered[0]

    async def _send_with_retry(self, topic: str, queue: MessageQueue | None,
                               make_request: Callable[[MessageQueue], RemotingCommand], timeout: float | None,
                               msg_id: str) -> SendResult:
        send_timeout = timeout or self.send_timeout
        deadline = time.monotonic() + send_timeout
        last_broker: str | None = None
        last_error: Exception | None = None
        route: TopicRouteData | None = None
        attempt = 0
        backoff = ROUTE_BACKOFF
        while attempt <= self.retry_times:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                route = await self._publish_route(topic)
                mq = queue or self._select_queue(route, topic, last_broker)
                last_broker = mq.broker_name
                addr = await self.instance.find_broker_addr(mq.broker_name, topic)
                started = time.monotonic()
                response = await self.instance.invoke_broker(addr, make_request(mq), remaining)
                self.faults.record(mq.broker_name, time.monotonic() - started, failed=False)
            except (NoRouteError, BrokerUnreachableError) as e:
                # Nothing reached a broker. Another broker, if one is up, is tried at once (an
                # attempt, as before); else the send waits for the route to change.
                last_error = e
                unreachable = isinstance(e, BrokerUnreachableError)
                if unreachable and last_broker is not None:
                    self.faults.record(last_broker, 0.0, failed=True)
                if queue is not None:
                    break
                if unreachable and attempt < self.retry_times and self._other_broker_up(route, topic, last_broker):
                    attempt += 1
                    continue
                await self._await_route(topic, backoff, deadline)
                backoff = min(backoff * 2, ROUTE_BACKOFF_MAX)
                continue
            except MQClientError as e:
                attempt += 1
                last_error = e
                if last_broker is not None:
                    self.faults.record(last_broker, 0.0, failed=True)
                    self.instance.schedule_route_refresh(topic)
                if queue is not None:
                    break
                continue
            if response.code in WRITE_REFUSALS and queue is None:
                # The broker takes no writes now (fenced, stepping down, a slave): avoid it; another
                # broker up is tried at once (an attempt), else the send waits for the route to
                # change (a new master), like a send with no reachable master.
                last_error = MQBrokerError(response.code, response.remark)
                self.faults.record(mq.broker_name, 0.0, failed=True)
                if attempt < self.retry_times and self._other_broker_up(route, topic, mq.broker_name):
                    attempt += 1
                    continue
                await self._await_route(topic, backoff, deadline)
                backoff = min(backoff * 2, ROUTE_BACKOFF_MAX)
                continue
            if response.code in RETRY_CODES:
                attempt += 1
                last_error = MQBrokerError(response.code, response.remark)
                if queue is not None and response.code != ResponseCode.SYSTEM_BUSY:
                    break
                if response.code == ResponseCode.SYSTEM_BUSY:
                    self.faults.record(mq.broker_name, 0.0, failed=True)
                    if queue is not None:  # the same broker again: give it a moment
                        await asyncio.sleep(min(BUSY_BACKOFF * 2 ** (attempt - 1),
                                                max(0.0, deadline - time.monotonic())))
                if response.code in (ResponseCode.NO_PERMISSION, ResponseCode.SERVICE_NOT_AVAILABLE):
                    # A read-only (draining) broker, or one that takes no sends now (a slave, a master
                    # replaced by failover): its route has changed or is about to, learn it now.
                    self.instance.schedule_route_refresh(topic)
                if response.code == ResponseCode.TOPIC_NOT_EXIST:
                    self.instance.forget_route(topic)
                continue
            if response.code not in (0, 10, 11, 12):
                raise MQBrokerError(response.code, response.remark)
            answer = SendMessageResponseHeader.read(response)
            queue_id = mq.queue_id if answer.queue_id is None else answer.queue_id
            return SendResult(SendStatus(response.code), msg_id, answer.msg_id, MessageQueue(topic, mq.broker_name, queue_id),
                              -1 if answer.queue_offset is None else answer.queue_offset, answer.recall_handle)
        if isinstance(last_error, BrokerUnreachableError):
            raise BrokerUnreachableError(f"send to {topic}: no reachable master within {send_timeout:g} s; "
                                         f"last: {last_error}") from last_error
        raise last_error or MQClientError(f"send to {topic} timed out")

    def _other_broker_up(self, route: TopicRouteData | None, topic: str, failed_broker: str | None) -> bool:
        """Some writable queue of ``route`` is on another broker not avoided for a failure."""
        return route is not None and any(mq.broker_name != failed_broker and self.faults.available(mq.broker_name)
                                         for mq in self._publish_queues(route, topic))

    async def _await_route(self, topic: str, delay: float, deadline: float) -> None:
        """Wait ``delay`` s (never past ``deadline``) for the route to change: woken early when
        any route is read meanwhile (another send's query, the periodic refresh), else ask the
        name server again, for the topic and, when it has no writable queue, the default topic
        it would be created from."""
        if await self.instance.route_read(min(delay, deadline - time.monotonic())):
            return
        with contextlib.suppress(MQClientError, RemotingError, asyncio.TimeoutError):
            route = await within(self.instance.refresh_route(topic), max(0.0, deadline - time.monotonic()))
            if route is None or not route.publish_queues(topic):
                await within(self.instance.refresh_route(DEFAULT_TOPIC),
                                       max(0.0, deadline - time.monotonic()))
