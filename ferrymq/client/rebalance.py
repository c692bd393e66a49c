"""Rebalance: which queues this member of a consumer group owns, and taking them over cleanly.

Every 20 s, and at once when the broker says the group changed (NOTIFY_CONSUMER_IDS_CHANGED),
each member lists the topic's queues (route) and the group's members (GET_CONSUMER_LIST_BY_GROUP),
runs the allocation strategy, and reconciles: queues it lost are dropped (their offsets
persisted first; orderly queues also unlocked once no listener call is running on them),
queues it gained start at the group's committed offset (or where ``consume_from_where``
says, for a group new to the queue). Orderly consumers only take a queue whose broker lock
they got; a queue still locked by its previous owner is tried again a second later rather
than at the next 20 s round. Broadcasting members simply own every queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.offset_store import NOT_FOUND, OffsetStore, ReadFrom
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.push_config import ConsumeFromWhere, MessageModel, PushConsumerConfig
from ferrymq.common.consumer_protocol import LockBatchRequestBody, LockBatchResponseBody, UnlockBatchRequestBody
from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX, ConsumerListBody, MessageQueue, SubscriptionData
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import ConsumerGroupHeader, Header, OffsetResponseHeader, QueueHeader, SearchOffsetHeader

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 1.0  # LOCK_BATCH_MQ for a single queue during a rebalance (Java: 1000 ms)
UNLOCK_WAIT = 1.0  # how long a rebalance waits for a running orderly listener call before giving up


def parse_consume_timestamp(text: str) -> int:
    """``yyyyMMddHHmmss`` (local time, as Java's UtilAll.parseDate) -> epoch milliseconds."""
    return int(time.mktime(time.strptime(text, "%Y%m%d%H%M%S")) * 1000)


StartPulling = Callable[[MessageQueue, ProcessQueue, int], None]  # a queue taken over: pull it from an offset


class Rebalancer:
    def __init__(self, group: str, client_id: str, config: PushConsumerConfig, *, orderly: bool,
                 instance: ClientInstance, subscriptions: Mapping[str, SubscriptionData], offset_store: OffsetStore,
                 start_pulling: StartPulling, assignment_changed: Callable[[str], Awaitable[None]]) -> None:
        """``subscriptions``: the consumer's live table (it changes with subscribe/unsubscribe);
        ``assignment_changed(topic)``: awaited after a round changed what this member owns."""
        self.group = group
        self.client_id = client_id
        self.config = config
        self.orderly = orderly
        self.instance = instance
        self.subscriptions = subscriptions
        self.offset_store = offset_store
        self.start_pulling = start_pulling
        self.assignment_changed = assignment_changed
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._lock = asyncio.Lock()

    @property
    def _clustering(self) -> bool:
        return self.config.message_model is MessageModel.CLUSTERING

    def owned(self, topic: str | None = None) -> list[MessageQueue]:
        return sorted(mq for mq in self.process_queues if topic is None or mq.topic == topic)

    # ------------------------------------------------------------------ the rebalance

    async def rebalance(self) -> bool:
        """One round over every subscribed topic; True if something should be retried soon."""
        retry_soon = False
        async with self._lock:
            for topic in list(self.subscriptions):
                try:
                    retry_soon |= await self._rebalance_topic(topic)
                except MQClientError as e:
                    log.warning("rebalance of %s for group %s failed: %s", topic, self.group, e)
                    retry_soon = True
            for mq in [m for m in self.process_queues if m.topic not in self.subscriptions]:
                pq = self.process_queues[mq]
                pq.dropped = True
                if await self._remove_unnecessary(mq, pq):
                    self._forget(mq)
        return retry_soon

    async def _rebalance_topic(self, topic: str) -> bool:
        instance = self.instance
        route = instance.routes.get(topic) or await instance.fetch_route(topic)
        if route is None:
            # The retry topic appears in the name server only after the broker created it on our
            # heartbeat and re-registered: not an error, just early.
            log.debug("no route for %s yet (group %s)", topic, self.group)
            return True
        mq_all = sorted(route.subscribe_queues(topic))
        if not self._clustering:
            return await self._update(topic, set(mq_all))
        cid_all = await self._consumer_ids(topic)
        if not cid_all or not mq_all:
            return True
        strategy = self.config.allocate_strategy
        try:
            mine = strategy.allocate(self.group, self.client_id, mq_all, sorted(cid_all))
        except Exception:
            log.exception("allocation strategy %s failed for group %s", getattr(strategy, "name", strategy), self.group)
            return True
        return await self._update(topic, set(mine or ()))

    async def _consumer_ids(self, topic: str) -> list[str]:
        instance = self.instance
        route = instance.routes.get(topic)
        brokers = [b.any_addr() for b in (route.broker_datas if route else []) if b.any_addr()]
        if not brokers:
            return []
        addr = random.choice(brokers)
        response = await instance.invoke_broker(addr, RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, ConsumerGroupHeader(consumer_group=self.group).to_ext_fields()))
        if response.code != ResponseCode.SUCCESS:
            log.warning("consumer list of group %s from %s: %s", self.group, addr, response.remark)
            return []
        return ConsumerListBody.from_json(response.body or b"{}").consumer_id_list

    async def _update(self, topic: str, mq_set: set[MessageQueue]) -> bool:
        """Drop what is no longer ours, add what is new; True if a lock could not be had."""
        changed = retry_soon = False
        for mq, pq in list(self.process_queues.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set or pq.pull_expired():
                if mq in mq_set:
                    log.warning("%s was not pulled for a long time; re-creating its process queue", mq)
                pq.dropped = True
                if await self._remove_unnecessary(mq, pq):
                    self._forget(mq)
                    changed = True
                else:
                    retry_soon = True
        lock_failed = False
        orderly_clustering = self.orderly and self._clustering
        for mq in sorted(mq_set - set(self.process_queues)):
            if orderly_clustering and not await self.lock(mq):
                log.info("group %s: %s is still locked by its previous owner; will retry", self.group, mq)
                lock_failed = True
                continue
            self.offset_store.remove(mq)  # a stale in-memory offset from an earlier ownership
            try:
                offset = await self.compute_pull_from_where(mq)
            except MQClientError as e:
                log.warning("cannot find where to start %s for group %s: %s", mq, self.group, e)
                lock_failed = True
                continue
            pq = ProcessQueue()
            if orderly_clustering:
                pq.locked, pq.last_lock_time = True, time.monotonic()
            self.process_queues[mq] = pq
            self.start_pulling(mq, pq, offset)
            changed = True
            log.info("group %s: %s now owns %s from offset %d", self.group, self.client_id, mq, offset)
        if changed:
            await self.assignment_changed(topic)
        return lock_failed or retry_soon

    def _forget(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq, None)
        if pq is not None:
            pq.clear()
            log.info("group %s: %s gave up %s", self.group, self.client_id, mq)

    async def _remove_unnecessary(self, mq: MessageQueue, pq: ProcessQueue, *, reset_to: int | None = None) -> bool:
        """Hand a dropped queue back: persist its offset; orderly: once no listener runs on it, unlock.

        An orderly listener commits its batch while holding the queue's consume lock, so once we
        hold that lock the offset we persist covers everything consumed: the next owner neither
        skips nor repeats (concurrent queues may repeat the batches in flight, never skip).
        ``reset_to`` (an offset reset) replaces the offset to persist."""
        store = self.offset_store
        if not (self.orderly and self._clustering):
            if reset_to is not None:
                store.update(mq, reset_to, increase_only=False)
            await store.persist(mq)
            store.remove(mq)
            return True
        try:
            async with asyncio.timeout(UNLOCK_WAIT):
                await pq.consume_lock.acquire()
        except TimeoutError:
            pq.try_unlock_times += 1
            log.info("group %s: %s is being consumed; unlock it later (try %d)", self.group, mq, pq.try_unlock_times)
            return False
        try:
            if reset_to is not None:
                store.update(mq, reset_to, increase_only=False)
            await store.persist(mq)
            store.remove(mq)
            await self.unlock([mq])
        finally:
            pq.consume_lock.release()
        return True

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        async with self._lock:
            pq = self.process_queues.get(mq)
            if pq is not None:
                pq.dropped = True
                if await self._remove_unnecessary(mq, pq):
                    self._forget(mq)

    async def release_topic(self, topic: str, reset_to: dict[MessageQueue, int]) -> None:
        """Offset reset: give up the topic's queues, persisting the offsets in ``reset_to``
        instead of ours; the next rebalance takes them again from there."""
        async with self._lock:
            mine = {mq: pq for mq, pq in self.process_queues.items() if mq.topic == topic}
            for pq in mine.values():
                pq.dropped = True
            for mq, pq in mine.items():
                if await self._remove_unnecessary(mq, pq, reset_to=reset_to.get(mq)):
                    self._forget(mq)

    async def drop_all(self) -> None:
        for pq in self.process_queues.values():
            pq.dropped = True

    # ------------------------------------------------------------------ where to start

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The group's committed offset, else the configured starting point (docs/wire-format.md#push-consumer-call-sequence, step 5)."""
        last = await self.offset_store.read(mq, ReadFrom.STORE)
        if last >= 0:
            return last
        if last != NOT_FOUND:
            raise MQClientError(f"the offset of {mq} could not be read")
        where = self.config.consume_from_where
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if where is ConsumeFromWhere.FIRST_OFFSET:
            return 0
        if where is ConsumeFromWhere.LAST_OFFSET:
            return 0 if is_retry else await self._max_offset(mq)
        if is_retry:
            return await self._max_offset(mq)
        timestamp = parse_consume_timestamp(self.config.consume_timestamp)
        header = SearchOffsetHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp)
        return await self._queue_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, header)

    async def _max_offset(self, mq: MessageQueue) -> int:
        return await self._queue_call(RequestCode.GET_MAX_OFFSET, mq, QueueHeader(topic=mq.topic, queue_id=mq.queue_id))

    async def _queue_call(self, code: int, mq: MessageQueue, header: Header) -> int:
        instance = self.instance
        addr = await instance.find_broker_addr(mq.broker_name, mq.topic)
        response = await instance.invoke_broker(addr, RemotingCommand.request(code, header.to_ext_fields()))
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark)
        return OffsetResponseHeader.offset_of(response, 0)

    # ------------------------------------------------------------------ orderly locks

    def _body(self, cls, mqs: list[MessageQueue]) -> bytes:
        return cls(consumer_group=self.group, client_id=self.client_id, mq_set=list(mqs)).to_json()

    async def lock(self, mq: MessageQueue) -> bool:
        """Lock one queue now (LOCK_BATCH_MQ); True if this client holds it."""
        instance = self.instance
        try:
            addr = await instance.find_broker_addr(mq.broker_name, mq.topic)
            response = await instance.invoke_broker(addr, RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, body=self._body(LockBatchRequestBody, [mq])), LOCK_TIMEOUT)
        except MQClientError as e:
            log.warning("locking %s failed: %s", mq, e)
            return False
        if response.code != ResponseCode.SUCCESS:
            return False
        ok = mq in set(LockBatchResponseBody.from_json(response.body or b"{}").lock_ok_mq_set)
        pq = self.process_queues.get(mq)
        if ok and pq is not None:
            pq.locked, pq.last_lock_time = True, time.monotonic()
        return ok

    def _by_broker(self, mqs) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            out.setdefault(mq.broker_name, []).append(mq)
        return out

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue (every 20 s); queues not granted stop consuming."""
        instance = self.instance
        for broker_name, mqs in self._by_broker(self.process_queues).items():
            try:
                addr = await instance.find_broker_addr(broker_name, mqs[0].topic)
                response = await instance.invoke_broker(addr, RemotingCommand.request(
                    RequestCode.LOCK_BATCH_MQ, body=self._body(LockBatchRequestBody, mqs)), LOCK_TIMEOUT)
            except MQClientError as e:
                log.warning("renewing locks on %s failed: %s", broker_name, e)
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            granted = set(LockBatchResponseBody.from_json(response.body or b"{}").lock_ok_mq_set)
            now = time.monotonic()
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is None:
                    continue
                if mq in granted:
                    if not pq.locked:
                        log.info("group %s: lock of %s regained", self.group, mq)
                    pq.locked, pq.last_lock_time = True, now
                elif pq.locked:
                    log.warning("group %s: lock of %s lost", self.group, mq)
                    pq.locked = False

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        instance = self.instance
        for broker_name, group in self._by_broker(mqs).items():
            try:
                addr = await instance.find_broker_addr(broker_name, group[0].topic)
                await instance.invoke_broker(addr, RemotingCommand.request(
                    RequestCode.UNLOCK_BATCH_MQ, body=self._body(UnlockBatchRequestBody, group)))
            except MQClientError as e:
                log.warning("unlocking %s on %s failed: %s", [str(m) for m in group], broker_name, e)
            for mq in group:
                pq = self.process_queues.get(mq)
                if pq is not None:
                    pq.locked = False

    async def unlock_all(self) -> None:
        await self.unlock(list(self.process_queues))
