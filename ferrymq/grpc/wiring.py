"""Whether and how a broker serves gRPC (``grpcListenPort``: -1 off, 0 a free port, else that
port). Imports the gRPC modules only when gRPC is on, so a broker without the ``grpc`` extra
starts (gRPC off, one log line) and one asked for gRPC without it refuses to start.

The broker does not import this package (it sits above the broker): whoever builds a broker
asks ``broker_grpc(config)`` for its gRPC side and hands it to ``Broker(..., grpc=...)``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ferrymq.common.config_loader import ConfigError
from ferrymq.grpc.availability import missing
from ferrymq.grpc.clients import GrpcClients

if TYPE_CHECKING:
    from ferrymq.broker.broker import Broker
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.broker.consumer_manager import ConsumerManager
    from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
    from ferrymq.broker.processors.send import SendProcessor
    from ferrymq.broker.recall import RecallService
    from ferrymq.broker.retry import RetryService
    from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
    from ferrymq.broker.topic_config_manager import TopicConfigManager
    from ferrymq.broker.transactions import TransactionService
    from ferrymq.grpc.endpoint import GrpcEndpoint
    from ferrymq.grpc.pulling import PullOffsets
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.store.asyncio_store import AsyncMessageStore
    from ferrymq.store.config import StoreConfig

log = logging.getLogger(__name__)


def check_grpc(config: "BrokerConfig") -> bool:
    """Whether gRPC is on; ConfigError when it is asked for but cannot run here."""
    why = missing()
    if config.grpc_listen_port < 0:
        log.info("gRPC endpoint off (grpcListenPort=-1)%s", f"; it would also need: {why}" if why else "")
        return False
    if why:
        raise ConfigError(f"grpcListenPort={config.grpc_listen_port} asks for the gRPC endpoint, but {why}")
    return True


class BrokerGrpc:
    """The gRPC side of one broker (``Broker(..., grpc=...)``): its table of v2 clients is there
    from the start (the broker's admin views and /metrics show 5.x consumers beside 4.x ones),
    the endpoint is made when the broker starts."""

    def __init__(self) -> None:
        self.clients = GrpcClients()

    def endpoint(self, broker: "Broker") -> "GrpcEndpoint":
        return grpc_endpoint(config=broker.config, store_config=broker.store_config, topics=broker.topics,
                             groups=broker.groups, send_processor=broker.send_processor,
                             transactions=broker.transactions,
                             retry=broker.retry, pop=broker.pop, namesrv_client=broker.namesrv_client,
                             remoting_address=lambda: broker.address,
                             acl_config=(lambda: broker.acl.config) if broker.acl is not None else None,
                             producers=broker.consumers, clients=self.clients, recalls=broker.recalls,
                             pull=broker.pull_processor, store=broker.ctx.store, offsets=broker.ctx.offsets)


def broker_grpc(config: "BrokerConfig") -> BrokerGrpc | None:
    """The gRPC side of a broker about to be built from ``config``: None when gRPC is off,
    ConfigError when ``grpcListenPort`` asks for it but it cannot run here (before anything starts)."""
    return BrokerGrpc() if check_grpc(config) else None


def grpc_endpoint(*, config: "BrokerConfig", store_config: "StoreConfig", topics: "TopicConfigManager",
                  groups: "SubscriptionGroupManager", send_processor: "SendProcessor",
                  transactions: "TransactionService",
                  retry: "RetryService", pop: Any, namesrv_client: "RemotingClient",
                  remoting_address: Callable[[], str], acl_config: Callable | None = None,
                  producers: "ConsumerManager | None" = None, clients: "GrpcClients | None" = None,
                  recalls: "RecallService | None" = None, pull: Callable | None = None,
                  store: "AsyncMessageStore | None" = None,
                  offsets: "ConsumerOffsetManager | None" = None) -> "GrpcEndpoint":
    """``acl_config``: the broker's current plain ACL when ``aclEnable`` (None: no checks);
    ``producers``: the broker's producer table (5.x producers join it for transaction checks);
    ``clients``: the table of v2 clients to keep (the broker's, read by its admin views and
    /metrics), else a new one; ``recalls``: the broker's recall service (RecallMessage);
    ``pull``, ``store``, ``offsets``: the broker's PULL_MESSAGE processor, store and consumer-offset
    table, for PullMessage and the offset calls. Without them those calls answer NOT_IMPLEMENTED.
    With ``traceTopicEnable`` the endpoint writes trace records for gRPC traffic (trace.py)."""
    from ferrymq.grpc.auth import GrpcAuth
    from ferrymq.grpc.endpoint import GrpcEndpoint
    from ferrymq.grpc.pulling import PullOffsets
    from ferrymq.grpc.routes import RouteDirectory
    from ferrymq.grpc.service import MessagingService, Peer
    from ferrymq.grpc.trace import GrpcTrace

    endpoint: GrpcEndpoint | None = None
    directory = RouteDirectory(namesrv_client, config.namesrv_addresses, remoting_address,
                               lambda: (config.advertised_host(), endpoint.port if endpoint else config.grpc_listen_port))
    if clients is None:
        clients = GrpcClients()

    def is_fifo_group(group: str) -> bool:
        config = groups.get(group)
        return config is not None and config.consume_message_orderly

    trace = None
    if config.trace_topic_enable:  # trace records for gRPC traffic (docs/trace.md#rocketmq-5-grpc-clients)
        trace = GrpcTrace(topic=config.msg_trace_topic_name, region=lambda: config.region_id,
                          send=lambda request, client: send_processor(request, Peer(client, {})))
    service = MessagingService(config=config, store_config=store_config, topics=topics, groups=groups,
                               send=send_processor.send,
                               transactions=transactions, retry=retry, pop=pop, directory=directory, clients=clients,
                               is_fifo_group=is_fifo_group, auth=GrpcAuth(acl_config) if acl_config else None,
                               producers=producers, recalls=recalls, trace=trace,
                               pulling=None if pull is None or store is None or offsets is None
                               else PullOffsets(topics=topics, pull=pull, store=store, offsets=offsets))
    endpoint = GrpcEndpoint(service, directory, clients, host=config.listen_host, port=config.grpc_listen_port,
                            max_message_bytes=config.max_frame_size,
                            client_expiry_ms=lambda: config.channel_expired_timeout, tls_mode=config.grpc_tls_mode,
                            cert_path=config.tls_server_cert_path, key_path=config.tls_server_key_path,
                            cert_hosts=(config.advertised_host(), config.listen_host),
                            cert_reload_interval=config.tls_cert_reload_interval_seconds, rounds=store)
    return endpoint
