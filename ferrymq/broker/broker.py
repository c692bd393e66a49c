"""The broker application: wires the store, the config tables, the processors and the
periodic tasks (name-server registration, offset persistence, client expiry) together."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
import zlib
from functools import partial
from pathlib import Path
from typing import Coroutine, Protocol

from ferrymq.acl.access_validator import AccessValidator, AclGuard
from ferrymq.acl.acl_file import AclFile, default_acl_path
from ferrymq.acl.signature import sign_request
from ferrymq.broker.client_notifier import ClientNotifier
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.context import BrokerContext
from ferrymq.broker.ha.lag import ReplicationLag
from ferrymq.broker.ha.metrics import ReplicationCollector
from ferrymq.broker.ha.replication import Replication
from ferrymq.broker.consumer_manager import ConsumerManager
from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.lock_manager import QueueLockManager
from ferrymq.broker.message_tracing import message_tracing
from ferrymq.broker.long_polling import PullWaiters
from ferrymq.broker.metrics import broker_registry
from ferrymq.broker.processors.acl_admin import AclAdminProcessors
from ferrymq.broker.processors.admin import AdminProcessor
from ferrymq.broker.processors.client_manage import ClientManageProcessors
from ferrymq.broker.processors.consumer_admin import ConsumerAdminProcessors
from ferrymq.broker.processors.offsets import OffsetProcessors
from ferrymq.broker.processors.pop import PopProcessors
from ferrymq.broker.processors.pull import PullProcessor
from ferrymq.broker.processors.query import QueryProcessors
from ferrymq.broker.processors.recall import RecallProcessor
from ferrymq.broker.processors.reply import ReplyProcessor
from ferrymq.broker.processors.send import SendProcessor
from ferrymq.broker.processors.transaction import EndTransactionProcessor, EndTransactionsProcessor
from ferrymq.broker.online_clients import GrpcClientTable, OnlineClients, OnlineClientsCollector
from ferrymq.broker.pop.metrics import PopCollector
from ferrymq.broker.timer_metrics import register_timer_metrics
from ferrymq.broker.pop.service import PopService
from ferrymq.broker.protection import ConsumeProtection
from ferrymq.broker.recall import RecallService
from ferrymq.broker.retry import RetryService
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.broker.timer_service import TimerService
from ferrymq.broker.stats import BrokerStats
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.broker.transactions import TransactionService
from ferrymq.common.address_lookup import changed_namesrv_addr
from ferrymq.common.config_loader import ConfigError
from ferrymq.common.transaction_batches import END_TRANSACTIONS, SEND_HALF_MESSAGES
from ferrymq.common.tasks import TaskSet, within
from ferrymq.common.protocol import SCHEDULE_TOPIC, TIMER_TOPIC, Perm, RegisterBrokerBody, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import RegisterBrokerHeader, UnregisterBrokerHeader
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.config import StoreConfig
from ferrymq.store.message_store import MessageStore

log = logging.getLogger(__name__)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Endpoint(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class GrpcSupport(Protocol):
    """The broker's RocketMQ 5 side (ferrymq/grpc), as the broker uses it. ``ferrymq/grpc`` sits
    above the broker (it serves the broker's tables), so the broker does not import it: whoever
    builds a broker hands it in (``ferrymq.grpc.wiring.broker_grpc``, docs/architecture.md#who-may-import-whom)."""

    clients: GrpcClientTable  # the table of v2 clients, there from the start

    def endpoint(self, broker: "Broker") -> Endpoint: ...


class Broker:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig, grpc: GrpcSupport | None = None) -> None:
        """``grpc``: the gRPC side, which ``grpcListenPort`` (not -1) needs
        (``ferrymq.grpc.wiring.broker_grpc(config)``: None when off)."""
        if config.grpc_listen_port >= 0 and grpc is None:
            raise ConfigError(f"grpcListenPort={config.grpc_listen_port} asks for the gRPC endpoint, but this broker "
                              "was built without it (ferrymq.grpc.wiring.broker_grpc)")
        self.config = config
        self.store_config = store_config
        if config.listen_port == 0:
            config.listen_port = free_port(config.listen_host)
        config_dir = Path(store_config.store_path_root_dir) / "config"
        self.topics = TopicConfigManager(config, config_dir)
        self.groups = SubscriptionGroupManager(config_dir, auto_create=config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetManager(config_dir)
        self.stats = BrokerStats()
        self.store = AsyncMessageStore(MessageStore(store_config),  # its store host is resolved at start
                                       append_on_loop=config.append_on_event_loop,
                                       slow_append_ms=config.slow_append_mills)
        self.pull_waiters = PullWaiters(self.store.max_offset)
        self.store.arrival_listeners.append(self.pull_waiters.notify)
        self.locks = QueueLockManager(config.rebalance_lock_max_live_time / 1000)
        self._tasks = TaskSet(f"broker {config.broker_name}", log)
        self.notifier = ClientNotifier(config, self.groups, self.spawn)
        self.consumers = ConsumerManager(on_group_changed=self.notifier.group_changed)
        try:
            tracing = message_tracing(config.otel_traces_endpoint, service_name=config.otel_service_name,
                                      broker_name=config.broker_name, cluster=config.broker_cluster_name)
        except RuntimeError as e:
            raise ConfigError(str(e)) from None
        self.ctx = BrokerContext(config, store_config, self.store, self.topics, self.groups, self.offsets,
                                 self.consumers, self.locks, self.pull_waiters, self.stats, self.spawn, tracing)
        # Consumer groups: delay levels, retries/DLQ, protection.
        self.schedule = ScheduleMessageService(self.ctx, config_dir)
        self.store.add_topic_arrival_listener(SCHEDULE_TOPIC, self.schedule.on_arrival)
        self.timers = TimerService(self.ctx)
        self.recalls = RecallService(self.ctx)  # timer messages recalled before they fire
        self.store.add_topic_arrival_listener(TIMER_TOPIC, self.timers.on_arrival)
        self.retry = RetryService(self.ctx, self.schedule)
        self.transactions = TransactionService(self.ctx, self.schedule.level_count)
        self.protection = ConsumeProtection(config, self.groups)
        self.server = RemotingServer(config.listen_host, config.listen_port, max_frame=config.max_frame_size, name="broker",
                                     tls=config.server_tls(),
                                     max_idle_seconds=config.server_channel_max_idle_time_seconds)
        # RocketMQ's VIP channel: the same service on listenPort - 2, for clients with
        # vipChannelEnabled (sendMessageWithVIPChannel)
        self.vip_server = self.server.mirror(config.listen_port - 2, "broker-vip") if config.listen_port > 2 else None
        self.acl = AclFile(config.acl_file or default_acl_path()) if config.acl_enable else None
        client_tls = config.client_tls()
        # The broker's own requests (name servers, its master, other brokers: gRPC relays) are
        # signed with innerClientAuthenticationCredentials when set, as Apache 5's BrokerOuterAPI.
        inner = config.inner_credentials()
        self.namesrv_client = RemotingClient(tls=client_tls.context() if client_tls else None,
                                             request_hook=partial(sign_request, credentials=inner) if inner else None)
        self.replication = Replication(config, store_config, self.store, self.namesrv_client, self.topics,
                                       self.offsets, self.groups, self.schedule, self._persist_tables)
        self.replication_lag = ReplicationLag(self.store, self.replication)
        # POP consumption (RocketMQ 5 ReceiveMessage/Ack): its journal beside the store; no
        # receive while replication refuses reads (a restarted broker waiting for its role)
        self.pop = PopService(self.ctx, self.retry, Path(store_config.store_path_root_dir) / "pop",
                              read_refusal=self.replication.read_refusal)
        self.store.arrival_listeners.append(self.pop.on_arrival)
        # RocketMQ 5 clients (ferrymq/grpc): checked before the broker was built, created in start()
        self._grpc_support = grpc if config.grpc_listen_port >= 0 else None
        self.grpc_enabled = self._grpc_support is not None
        self.grpc: Endpoint | None = None
        # its client table is the broker's: admin views and /metrics show 5.x consumers beside 4.x ones
        self.grpc_clients = self._grpc_support.clients if self._grpc_support is not None else None
        receivers = self.pop.receivers
        self.online_clients = OnlineClients(self.consumers, self.grpc_clients, receivers.clients, receivers.groups,
                                            lambda: self.config.channel_expired_timeout / 1000, receivers.agent)
        self.stopping = False
        self.registered = asyncio.Event()
        self._register_wanted = asyncio.Event()
        self.demoted = asyncio.Event()  # controller mode: replaced as master, the process should stop
        self._master_services = False
        if self.replication.failover is not None:
            self.replication.failover.on_lead = self._take_up_mastership
            self.replication.failover.on_role_change = self._register_wanted.set
            self.replication.failover.on_demoted = lambda _reason: self.demoted.set()
            self.replication.failover.on_fenced = self._drop_client_connections
        self._register_processors()
        self.server.add_connection_listener(on_close=self.consumers.connection_closed)
        self.topics.on_change = self._on_topics_changed
        self.metrics_registry, self.flush_latency = broker_registry(self.ctx, lambda: len(self.server.connections))
        self.metrics_registry.register(PopCollector(config, self.pop))
        register_timer_metrics(self.metrics_registry, config, self.timers, self.store.pending_timers)
        self.metrics_registry.register(OnlineClientsCollector(config.broker_cluster_name, config.broker_name,
                                                              self.online_clients))
        self.metrics_registry.register(ReplicationCollector(config, self.replication_lag))
        self.store_loaded = False

    @property
    def store_host(self) -> tuple[str, int] | None:
        """STOREHOST of every record: the advertised host's IP, resolved when the broker starts."""
        return self.store.store_host

    @property
    def address(self) -> str:
        return self.config.advertised_addr(self.server.port)

    def _register_processors(self) -> None:
        ctx = self.ctx
        self.send_processor = send = SendProcessor(ctx, self.schedule, self.transactions)
        self.server.register(RequestCode.END_TRANSACTION, EndTransactionProcessor(self.transactions))
        self.server.register(END_TRANSACTIONS, EndTransactionsProcessor(self.transactions))
        self.server.register(RequestCode.RECALL_MESSAGE, RecallProcessor(self.recalls, self.config.region_id))
        reply = ReplyProcessor(ctx)
        for code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
            self.server.register(code, reply)
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                     SEND_HALF_MESSAGES):
            self.server.register(code, send, eager=True)  # most sends never wait: no task for them
        # The sends of one read are written together (one write per file, not three a message).
        self.server.set_dispatch_rounds(ctx.store)
        # Most pulls find their messages (or nothing, without holding) at once: no task for them either.
        self.pull_processor = PullProcessor(ctx, self.protection, self.pop.classic_pull_refusal,
                                            self.replication.read_refusal)  # gRPC PullMessage uses it too
        for code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):  # 5.x lite pull: the same pull
            self.server.register(code, self.pull_processor, eager=True)
        for code, handler in PopProcessors(self.pop, self.config.enable_property_filter).handlers().items():
            self.server.register(code, handler)
        offsets = OffsetProcessors(self.store, self.offsets)
        cm = ClientManageProcessors(self.consumers, self.groups, self.topics, self.config.enable_property_filter)
        for code, handler in {
            RequestCode.QUERY_CONSUMER_OFFSET: offsets.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: offsets.update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: offsets.get_max_offset,
            RequestCode.GET_MIN_OFFSET: offsets.get_min_offset,
            RequestCode.GET_ALL_CONSUMER_OFFSET: offsets.get_all_consumer_offset,
            RequestCode.HEART_BEAT: cm.heartbeat,
            RequestCode.UNREGISTER_CLIENT: cm.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: cm.get_consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: cm.check_client_config,
        }.items():
            self.server.register(code, handler)
        consumer_admin = ConsumerAdminProcessors(ctx, self.retry, self.schedule, self.protection, self.notifier,
                                                 self.online_clients)
        for code, handler in consumer_admin.handlers().items():
            self.server.register(code, handler)
        for code, handler in QueryProcessors(self.store, self.store_config).handlers().items():
            self.server.register(code, handler)
        for code, handler in AclAdminProcessors(self.acl, self.config, lambda: self.address).handlers().items():
            self.server.register(code, handler)
        self.server.register_default(AdminProcessor(ctx, self.config_updated, self.replication_lag.status))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.acl is not None:  # before anything listens: a broken ACL file stops the start
            await asyncio.to_thread(self.acl.load)
            self.server.set_request_guard(AclGuard(AccessValidator(lambda: self.acl.config, self.config.msg_trace_topic_name)))
            self.spawn(self.acl.watch(), "acl-reload")
        await asyncio.to_thread(self._load_config_tables)
        await self.store.load(await self._resolve_store_host())
        self.store_loaded = True
        self.replication_lag.loaded()
        self._repair_topics_from_store()
        await self.pop.load()  # POP state from its journal, checked against the loaded store
        self.pop.start()
        await self.server.start()
        if self.vip_server is not None:
            try:
                await self.vip_server.start()
            except OSError as e:  # RocketMQ would not start; FerryMQ serves without the VIP port
                log.warning("VIP port %d unavailable (%s): clients with vipChannelEnabled cannot reach this broker",
                            self.vip_server.port, e)
                self.vip_server = None
        if self._grpc_support is not None:
            self.grpc = self._grpc_support.endpoint(self)
            await self.grpc.start()
        log.info("broker %s (%s) listening on %s:%d, advertised as %s, store %s",
                 self.config.broker_name, self.config.broker_cluster_name, self.config.listen_host,
                 self.server.port, self.address, self.store_config.store_path_root_dir)
        self._tasks.every(self.config.flush_consumer_offset_interval / 1000, self.persist_offsets, "offset-persist")
        self._tasks.every(10, self._expire_clients, "client-expiry")
        await self.replication.start()
        if not self.config.is_slave:  # a slave's store takes only its master's data
            self._start_master_services()
        self.spawn(self._protection_loop(), "broker-protection")
        if not self.store_config.sync_flush:
            self._tasks.every(self.store_config.flush_interval_commit_log / 1000, self._flush_commit_log,
                              "commitlog-flush")
        self._tasks.every(self.store_config.flush_interval_consume_queue / 1000, self.store.flush_consume_queues_timed,
                          "consumequeue-flush")
        self._tasks.every(self.store_config.clean_resource_interval / 1000, self._clean_store, "store-clean")
        if not self.config.namesrv_addresses() and self.config.fetch_namesrv_addr_by_address_server:
            await self._fetch_namesrv_addr()
            self._tasks.every(self.config.fetch_name_srv_addr_interval / 1000, self._fetch_namesrv_addr,
                              "namesrv-addr-fetch")
        if self.config.namesrv_addresses() or self.config.fetch_namesrv_addr_by_address_server:
            self.spawn(self._registration_loop(), "namesrv-registration")
        else:
            log.warning("no name server address (namesrvAddr); clients can reach this broker only directly")

    def _drop_client_connections(self) -> None:
        """A fenced master closes every client connection at once (no graceful drain): a
        producer holding one must not be answered by a broker that may not be master any more;
        it reconnects through the route to whichever broker is."""
        connections = self._client_connections()
        log.warning("fenced: closing %d client connection(s)", len(connections))
        for connection in connections:
            self._tasks.spawn(connection.close(), "fence-close")

    def _client_connections(self) -> list:
        servers = [self.server] + ([self.vip_server] if self.vip_server is not None else [])
        return [c for server in servers for c in server.connections]

    def _take_up_mastership(self) -> None:
        """Controller mode, this broker just became master: a topic whose config the slave had not
        copied yet (SlaveSynchronize runs every slaveSynchronizeInterval) but whose queues it holds is
        declared from the store, so its route survives the registration as master. Registrations
        carry the epoch (stateVersion), so a name server keeps this broker's address against a
        deposed master's late registration."""
        self._repair_topics_from_store()
        self.topics.data_version.state_version = self.replication.failover.epoch
        self.topics.data_version.next()
        self._start_master_services()

    def _start_master_services(self) -> None:
        """Delay levels and transaction checks put messages: a master's work (once a slave is
        promoted, in controller mode)."""
        if not self._master_services:
            self._master_services = True
            self.pop.adopt_synced_offsets()  # POP progress a previous master made, synced here
            self.schedule.start()
            self.timers.start()
            self.spawn(self.transactions.run(), "transaction-check")

    def _load_config_tables(self) -> None:
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.schedule.load()

    async def _resolve_store_host(self) -> tuple[str, int]:
        """The advertised host as an IPv4 literal (records and offset msgIds embed it),
        through the loop's resolver: brokerIP1 may be a DNS name (a pod's stable name)."""
        host = self.config.advertised_host()
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, family=socket.AF_INET,
                                                             type=socket.SOCK_STREAM)
        return infos[0][4][0], self.config.listen_port

    def _repair_topics_from_store(self) -> None:
        """A queue found on disk whose topic config was lost is re-declared, so its data stays reachable."""
        for topic, queue_ids in self.store.topic_queue_ids().items():
            if topic not in self.topics.table and queue_ids:
                n = max(queue_ids) + 1
                log.warning("topic %s has data on disk but no config; re-creating it with %d queues", topic, n)
                self.topics.ensure(topic, n)

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.replication.failover is not None and await self.replication.failover.hand_over():
            # A master with an in-sync slave handed over: the sends that made it in are answered;
            # later ones would wait on a broker that is stopping. Clients whose connection is gone
            # look the route up again and find the new master.
            await asyncio.gather(*(c.close() for c in self._client_connections()), return_exceptions=True)
        self.pull_waiters.close()
        self.pop.release_held()
        await self._unregister_from_namesrvs()
        await self._tasks.close()
        await self.replication.stop()
        if self.grpc is not None:
            await self.grpc.stop()
        await self.server.stop()
        if self.vip_server is not None:
            await self.vip_server.stop()
        await self.namesrv_client.close()
        await self.pop.close()
        await self._persist_tables()
        await self.store.shutdown()
        if self.ctx.tracing.enabled:
            await asyncio.to_thread(self.ctx.tracing.shutdown)  # exports the spans still queued
        log.info("broker %s stopped cleanly", self.config.broker_name)

    async def _persist_tables(self) -> None:
        await self.topics.persist()
        await self.groups.persist(force=True)
        await self.offsets.persist(force=True)
        await self.schedule.persist()

    def spawn(self, coro: Coroutine, name: str | None = None) -> asyncio.Task:
        """Run ``coro`` as one of the broker's background tasks (cancelled by ``stop``)."""
        return self._tasks.spawn(coro, name)

    async def _flush_commit_log(self) -> None:
        started = time.perf_counter()
        await self.store.flush_commit_log_timed()  # flushCommitLogLeastPages / ...ThoroughInterval
        self.flush_latency.observe(time.perf_counter() - started)

    async def _clean_store(self) -> None:
        """Retention and the disk guard (store/retention.py); a failed run is retried next time."""
        try:
            await self.store.clean()
        except OSError as exc:
            log.error("store retention run failed: %s", exc)

    async def persist_offsets(self) -> None:
        await self.offsets.persist()
        await self.groups.persist()

    async def _protection_loop(self) -> None:
        # The interval is re-read every round, so UPDATE_BROKER_CONFIG changes it live.
        while True:
            await asyncio.sleep(max(self.config.protect_broker_interval_millis, 100) / 1000)
            await self.protection.check()

    async def _expire_clients(self) -> None:
        self.consumers.expire(self.config.channel_expired_timeout / 1000)

    # ------------------------------------------------------------------ name servers

    def _on_topics_changed(self) -> None:
        if not self.stopping:
            self.spawn(self.topics.persist(), "topic-persist")
            self._register_wanted.set()

    async def _registration_loop(self) -> None:
        period = min(max(self.config.register_name_server_period, 10_000), 60_000) / 1000
        retry = 0.5
        while True:
            self._register_wanted.clear()
            await self.replication.registrable.wait()  # controller mode: once the controller gave a role
            ok = await self.register_with_namesrvs()
            # Until some name server has us, retry soon (doubling): a broker that started
            # before its name servers should become reachable seconds after they do.
            wait = period if ok else retry
            retry = 0.5 if ok else min(retry * 2, period)
            with contextlib.suppress(asyncio.TimeoutError):
                await within(self._register_wanted.wait(), wait)

    async def _fetch_namesrv_addr(self) -> None:
        """The name servers from the address service; a new list is registered with at once."""
        addr = await changed_namesrv_addr(self.config.rmq_address_server_domain,
                                          self.config.rmq_address_server_sub_group, self.config.namesrv_addr)
        if addr:
            self.config.namesrv_addr = addr
            self._register_wanted.set()

    def config_updated(self, keys: set[str]) -> None:
        """UPDATE_BROKER_CONFIG applied ``keys``. As RocketMQ, a new brokerPermission reaches
        the name servers at once (a fresh data version, registration now): a broker made
        read-only stops getting sends within one client route refresh, not one broker timer."""
        if "brokerPermission" in keys:
            self.topics.announce()

    def _register_command(self) -> RemotingCommand:
        wrapper = self.topics.wrapper()
        perm = self.config.broker_permission
        if perm != Perm.READ_WRITE:
            # RocketMQ registers every topic with its perm masked by the broker's, so routes
            # show a read-only (draining) broker as such and producers leave it.
            wrapper = TopicConfigSerializeWrapper(
                {name: dataclasses.replace(tc, perm=tc.perm & perm) for name, tc in wrapper.topic_config_table.items()},
                wrapper.data_version)
        body = RegisterBrokerBody(wrapper).to_json()
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, RegisterBrokerHeader(
            broker_addr=self.address, broker_name=self.config.broker_name,
            cluster_name=self.config.broker_cluster_name, broker_id=self.config.broker_id,
            ha_server_addr=f"{self.config.advertised_host()}:{self.replication.ha_port}",
            compressed=False, body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        ).to_ext_fields(), body)

    async def register_with_namesrvs(self) -> bool:
        addrs = self.config.namesrv_addresses()
        timeout = self.config.register_broker_timeout_mills / 1000
        results = await asyncio.gather(*(self.namesrv_client.invoke(a, self._register_command(), timeout) for a in addrs),
                                       return_exceptions=True)
        ok = 0
        for addr, result in zip(addrs, results):
            if isinstance(result, BaseException):
                log.warning("registering with name server %s failed: %s", addr, result)
            elif result.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused registration: %s", addr, result.remark)
            else:
                ok += 1
                self.replication.registered(result)
        if ok:
            self.registered.set()
        return ok > 0

    async def _unregister_from_namesrvs(self) -> None:
        for addr in self.config.namesrv_addresses():
            with contextlib.suppress(RemotingError, OSError):
                header = UnregisterBrokerHeader(broker_addr=self.address, broker_name=self.config.broker_name,
                                                cluster_name=self.config.broker_cluster_name,
                                                broker_id=self.config.broker_id)
                await self.namesrv_client.invoke(addr, header.request(RequestCode.UNREGISTER_BROKER), 3.0)

    # ------------------------------------------------------------------ info

    def readiness(self) -> tuple[bool, str]:
        """Ready = store recovered and at least one name server took our registration."""
        if not self.store_loaded:
            return False, "store not loaded"
        if self.stopping:
            return False, "shutting down"
        if self.config.namesrv_addresses() and not self.registered.is_set():
            return False, "not registered with any name server"
        return True, ""
