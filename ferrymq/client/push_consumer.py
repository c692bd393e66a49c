"""PushConsumer: a consumer group member that pulls for you and calls your listener.

    consumer = PushConsumer("orders-group", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")
    consumer.register_listener(handle)            # or register_listener(handle, orderly=True)
    await consumer.start()
    ...
    await consumer.shutdown()

What it does, as RocketMQ's DefaultMQPushConsumer (and compatible with it in one group):

* heartbeats its subscriptions (plus ``%RETRY%<group>`` in clustering) to every broker;
* rebalances (rebalance.py) every 20 s and whenever a broker says the group changed;
* one pull task per owned queue: long polling (held 15 s on the broker, 30 s timeout), paused
  while the queue holds too much (flow control: count, MiB, offset span) until the listener
  has consumed some;
* hands messages to the listener through a bounded executor, concurrently
  (consume_concurrently.py) or in order per queue (consume_orderly.py);
* failed messages go back to the broker (CONSUMER_SEND_MSG_BACK) for delayed redelivery
  through the retry topic and, after maxReconsumeTimes, the DLQ; if the broker cannot take
  them back they are re-sent to ``%RETRY%<group>`` directly, as the Java client does;
* offsets: in memory, persisted every 5 s and at shutdown (offset_store.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Callable

from ferrymq.client.config import ClientConfig
from ferrymq.client.consume_concurrently import ConcurrentConsumeService
from ferrymq.client.consume_orderly import OrderlyConsumeService
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.listener import Listener
from ferrymq.client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.pull_service import PullResult, PullService, PullStatus
from ferrymq.client.push_config import MessageModel, PushConsumerConfig
from ferrymq.client.rebalance import Rebalancer
from ferrymq.client.send_back import SendBack
from ferrymq.common.consumer_protocol import (
    CheckClientRequestBody,
    ResetOffsetBody,
    build_subscription,
    subscription_of,
)
from ferrymq.common.message import MessageExt
from ferrymq.common.protocol import (
    RETRY_GROUP_TOPIC_PREFIX,
    ConsumerData,
    MessageQueue,
    SubscriptionData,
    retry_topic,
)
from ferrymq.common.tasks import TaskSet
from ferrymq.common.validators import validate_group
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import ConsumerGroupHeader, ResetOffsetHeader
from ferrymq.remoting.request_headers import PullMessageHeader, PullSysFlag

log = logging.getLogger(__name__)

MIB = 1024 * 1024
ORDERLY_NOT_LOCKED_DELAY = 3.0  # an orderly queue whose lock is not held: look again this much later
OFFSET_ILLEGAL_GRACE = 10.0  # RocketMQ waits this long before re-creating a queue after OFFSET_ILLEGAL


class PushConsumer:
    def __init__(self, group: str, *, namesrv_addr: str | None = None, config: ClientConfig | None = None,
                 push_config: PushConsumerConfig | None = None, **settings) -> None:
        error = validate_group(group)
        if error:
            raise MQClientError(error)
        self.group = group
        self.client_config = config or ClientConfig()
        if namesrv_addr:
            self.client_config.namesrv_addr = namesrv_addr
        self.config = push_config or PushConsumerConfig()
        if settings:
            self.config = dataclasses.replace(self.config, **settings)  # TypeError names an unknown setting
        self.instance = ClientInstance(self.client_config)
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.listener: Listener | None = None
        self.orderly = False
        # Made by start(), once the listener kind and the message model are settled:
        self.rebalancer: Rebalancer | None = None
        self.offset_store: RemoteBrokerOffsetStore | LocalFileOffsetStore = RemoteBrokerOffsetStore(self.instance, group)
        self.send_back: SendBack | None = None
        self.service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._pulls = PullService(self.instance, self.client_config.serialize_type)
        self.consumed = 0  # messages whose consumption finished (successfully or handed back)
        self.flow_controlled = 0  # pulls postponed by flow control
        # Called with the sorted owned queues after every assignment change (observability, tests).
        self.assignment_listeners: list[Callable[[list[MessageQueue]], None]] = []
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self._tasks = TaskSet(f"push consumer {group}", log)  # pull loops included
        self._rebalance_wanted = asyncio.Event()
        self._running = False

    @property
    def client_id(self) -> str:
        return self.client_config.client_id

    @property
    def clustering(self) -> bool:
        return self.config.message_model is MessageModel.CLUSTERING

    # ------------------------------------------------------------------ set-up

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> "PushConsumer":
        """``expression``: tags (``*``, ``TagA || TagB``); ``sql``: a SQL92 selector on message
        properties instead (RocketMQ's MessageSelector.bySql; the brokers need
        enablePropertyFilter=true). A selector that does not compile raises MQClientError."""
        try:
            self.subscriptions[topic] = subscription_of(topic, expression, sql)
        except ValueError as e:
            raise MQClientError(f"subscription to {topic}: {e}") from None
        if self._running:
            self._update_consumer_data()
            self._tasks.spawn(self._resubscribed())
        return self

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self._running:
            self._update_consumer_data()
            self._tasks.spawn(self._resubscribed())

    async def _resubscribed(self) -> None:
        await self.instance.send_heartbeats()
        self._rebalance_wanted.set()

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> "PushConsumer":
        if self._running:
            raise MQClientError("register the listener before start()")
        self.listener, self.orderly = listener, orderly
        return self

    def register_message_listener_concurrently(self, listener: Listener) -> "PushConsumer":
        return self.register_listener(listener)

    def register_message_listener_orderly(self, listener: Listener) -> "PushConsumer":
        return self.register_listener(listener, orderly=True)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "PushConsumer":
        if self._running:
            return self
        if self.listener is None:
            raise MQClientError("no listener registered (register_listener before start)")
        if not self.subscriptions:
            raise MQClientError("no subscription (subscribe before start)")
        try:
            await self._start()
        except BaseException:
            await self._abandon_start()
            raise
        log.info("push consumer %s of group %s started (%s, %s)", self.client_id, self.group,
                 self.config.message_model.value, "orderly" if self.orderly else "concurrently")
        return self

    async def _check_filters_in_brokers(self) -> None:
        """As RocketMQ's client: a start with a subscription the brokers cannot filter fails."""
        for sub in self.subscriptions.values():
            if sub.expression_type == "TAG":
                continue
            body = CheckClientRequestBody(self.client_id, self.group, sub).to_json()
            for addr in self.instance.broker_addresses():
                response = await self.instance.invoke_broker(
                    addr, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body=body))
                if response.code != ResponseCode.SUCCESS:
                    raise MQClientError(f"broker {addr} refuses the {sub.expression_type} subscription to "
                                        f"{sub.topic}: {response.remark}")

    async def _abandon_start(self) -> None:
        self._running = False
        if self.rebalancer is not None:
            await self.rebalancer.drop_all()
        await self._tasks.close(timeout=10)
        if self.service:
            await self.service.shutdown()
        self.instance.consumer_data.pop(self.group, None)
        await self.instance.close()

    async def _start(self) -> None:
        if self.clustering:
            self.subscriptions.setdefault(retry_topic(self.group), build_subscription(retry_topic(self.group), "*"))
            self.offset_store = RemoteBrokerOffsetStore(self.instance, self.group)
        else:
            self.offset_store = LocalFileOffsetStore(self.config.offset_store_dir, self.client_id, self.group)
        await self.offset_store.load()
        self.instance.request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_ids_changed
        self.instance.request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = self._on_reset_offset
        self.rebalancer = Rebalancer(
            self.group, self.client_id, self.config, orderly=self.orderly, instance=self.instance,
            subscriptions=self.subscriptions, offset_store=self.offset_store, start_pulling=self.start_pulling,
            assignment_changed=self.on_assignment_changed)
        self.send_back = SendBack(self.instance, self.group, timeout=self.config.send_back_timeout,
                                  max_reconsume_times=self.config.effective_max_reconsume_times(self.orderly),
                                  broker_of=self._broker_of)
        parts = dict(send_back=self.send_back, offset_store=self.offset_store, on_consumed=self._count_consumed)
        if self.orderly:
            self.service = OrderlyConsumeService(self.group, self.config, self.listener, locks=self.rebalancer, **parts)
        else:
            self.service = ConcurrentConsumeService(self.group, self.config, self.listener, **parts)
        self.service.start()
        await self.instance.start()
        for topic in self.subscriptions:
            route = await self.instance.fetch_route(topic)  # raises when no name server answers
            if route is None and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("topic %s has no route yet; group %s will consume it once it exists", topic, self.group)
        await self._check_filters_in_brokers()
        self._update_consumer_data()
        await self.instance.send_heartbeats()
        self._running = True
        retry_soon = await self.rebalancer.rebalance()
        self._tasks.spawn(self._rebalance_loop(1.0 if retry_soon else self.config.rebalance_interval))
        self._tasks.spawn(self._persist_loop())

    async def shutdown(self) -> None:
        """Finish listener calls in progress (bounded), persist offsets, leave the group."""
        if not self._running:
            await self.instance.close()
            return
        self._running = False
        await self._tasks.close(timeout=10)
        if self.service:
            await self.service.shutdown()
        owned = set(self.rebalancer.process_queues)
        await self.offset_store.persist_all(owned, oneway=False)
        if self.orderly and self.clustering:
            await self.rebalancer.unlock_all()
        await self.rebalancer.drop_all()
        if self.clustering:
            await self.instance.unregister(consumer_group=self.group)
        self.instance.consumer_data.pop(self.group, None)
        await self.instance.close()
        log.info("push consumer %s of group %s shut down", self.client_id, self.group)

    close = shutdown

    async def __aenter__(self) -> "PushConsumer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    def _update_consumer_data(self) -> None:
        self.instance.consumer_data[self.group] = ConsumerData(
            group_name=self.group, consume_type="CONSUME_PASSIVELY", message_model=self.config.message_model.value,
            consume_from_where=self.config.consume_from_where.value,
            subscription_data_set=list(self.subscriptions.values()))

    # ------------------------------------------------------------------ periodic work

    async def _rebalance_loop(self, first_wait: float) -> None:
        wait, backoff = first_wait, 1.0
        while self._running:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that arrives just
            # as the event is set, and shutdown would then wait for this loop forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._rebalance_wanted.wait()
            self._rebalance_wanted.clear()
            try:
                retry_soon = await self.rebalancer.rebalance()
            except MQClientError as e:
                log.warning("rebalance of group %s failed: %s", self.group, e)
                retry_soon = True
            if retry_soon:
                wait, backoff = backoff, min(backoff * 2, self.config.rebalance_interval)
            else:
                wait, backoff = self.config.rebalance_interval, 1.0

    def _count_consumed(self, n: int) -> None:
        self.consumed += n

    def rebalance_soon(self) -> None:
        self._rebalance_wanted.set()

    async def _persist_loop(self) -> None:
        while self._running:
            await asyncio.sleep(self.config.persist_consumer_offset_interval)
            await self.offset_store.persist_all(set(self.rebalancer.process_queues), oneway=True)

    async def on_assignment_changed(self, topic: str) -> None:
        """Called by the rebalance: brokers learn the new state at once (RocketMQ does the same)."""
        await self.instance.send_heartbeats()
        owned = self.rebalancer.owned()
        for listener in self.assignment_listeners:
            listener(owned)

    # ------------------------------------------------------------------ requests from brokers

    async def _on_ids_changed(self, request: RemotingCommand, conn: Connection) -> None:
        group = ConsumerGroupHeader.read(request).consumer_group
        log.info("group %s changed (told by %s); rebalancing now", group, conn.remote_address)
        self._rebalance_wanted.set()
        return None

    async def _on_reset_offset(self, request: RemotingCommand, conn: Connection) -> None:
        notice = ResetOffsetHeader.read(request)
        if notice.group != self.group:
            return None
        topic = notice.topic
        table = ResetOffsetBody.from_json(request.body or b"{}").offset_table
        self._tasks.spawn(self._reset_offsets(topic, table))
        return None

    async def _reset_offsets(self, topic: str, table: dict[MessageQueue, int]) -> None:
        """Drop the topic's queues, store the new offsets, and let the rebalance take them again."""
        await self.rebalancer.release_topic(topic, table)
        log.info("group %s: offsets of %s reset to %s", self.group, topic, {mq.queue_id: o for mq, o in table.items()})
        self._rebalance_wanted.set()

    # ------------------------------------------------------------------ pulling

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        old = self._pull_tasks.get(mq)
        if old is not None and not old.done():
            old.cancel()
        task = self._tasks.spawn(self._pull_loop(mq, pq, offset), name=f"pull {mq}")  # failures logged there
        self._pull_tasks[mq] = task

        def done(t: asyncio.Task) -> None:
            if self._pull_tasks.get(mq) is t:
                del self._pull_tasks[mq]

        task.add_done_callback(done)

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        cfg = self.config
        if pq.msg_count > cfg.pull_threshold_for_queue or pq.msg_size > cfg.pull_threshold_size_for_queue * MIB:
            return True
        return not self.orderly and pq.max_span() > cfg.consume_concurrently_max_span

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        cfg = self.config
        next_offset = offset
        while self._running and not pq.dropped:
            pq.last_pull_time = time.monotonic()
            if self._flow_controlled(pq):
                self.flow_controlled += 1
                await pq.wait_for_room(cfg.flow_control_delay)
                continue
            if self.orderly and self.clustering and not pq.locked:
                await asyncio.sleep(ORDERLY_NOT_LOCKED_DELAY)
                continue
            sub = self.subscriptions.get(mq.topic)
            if sub is None:
                await asyncio.sleep(cfg.pull_delay_on_error)
                continue
            try:
                result = await self._pull(mq, next_offset, sub)
            except MQBrokerError as e:
                level = logging.WARNING if e.code == ResponseCode.NO_PERMISSION else logging.DEBUG
                log.log(level, "pull of %s refused: code %d %s", mq, e.code, e.remark)
                await asyncio.sleep(0.02 if e.code == ResponseCode.FLOW_CONTROL else cfg.pull_delay_on_error)
                continue
            except MQClientError as e:
                log.debug("pull of %s at %d failed: %s", mq, next_offset, e)
                await asyncio.sleep(cfg.pull_delay_on_error)
                continue
            if pq.dropped:
                return
            next_offset = result.next_begin_offset
            if result.status is PullStatus.FOUND:
                if result.messages:
                    dispatch = pq.put(result.messages)
                    self.service.submit(result.messages, pq, mq, dispatch)
            elif result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning("group %s: offset of %s illegal (%s); moving to %d", self.group, mq, result.remark, next_offset)
                pq.dropped = True
                self._tasks.spawn(self._offset_moved(mq, next_offset))
                return
            elif pq.msg_count == 0:  # nothing new, nothing in flight: the empty stretch can be committed
                self.offset_store.update(mq, next_offset, increase_only=True)
            if cfg.pull_interval > 0:
                await asyncio.sleep(cfg.pull_interval)

    async def _offset_moved(self, mq: MessageQueue, offset: int) -> None:
        await asyncio.sleep(OFFSET_ILLEGAL_GRACE)
        self.offset_store.update(mq, offset, increase_only=False)
        await self.offset_store.persist(mq)
        await self.rebalancer.remove_process_queue(mq)
        self._rebalance_wanted.set()

    async def _pull(self, mq: MessageQueue, offset: int, sub: SubscriptionData) -> PullResult:
        flags, commit = PullSysFlag.SUSPEND, 0
        if self.clustering:
            in_memory = self.offset_store.table.get(mq, -1)
            if in_memory > 0:
                flags |= PullSysFlag.COMMIT_OFFSET
                commit = in_memory
        header = PullMessageHeader(self.group, mq.topic, mq.queue_id, offset, self.config.pull_batch_size, flags, commit,
                                   int(self.config.broker_suspend_max * 1000), sub_version=sub.sub_version)
        return await self._pulls.pull(mq, header, sub, self.config.pull_timeout)

    # ------------------------------------------------------------------ failed messages (send_back.py)

    def _broker_of(self, msg: MessageExt) -> str:
        for mq in self.rebalancer.process_queues:
            if mq.queue_id == msg.queue_id and mq.topic in (msg.topic, retry_topic(self.group)):
                return mq.broker_name
        return next(iter(self.instance.broker_addrs), "")
