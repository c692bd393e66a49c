"""Broker settings, named as RocketMQ names them (``brokerName`` -> ``broker_name``).

A ``broker.conf`` holds both these and the store's settings (:class:`StoreConfig`); the
one loader in :mod:`ferrymq.common.config_loader` applies each key to whichever has it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from ferrymq.acl.signature import Credentials
from ferrymq.common.address_lookup import DEFAULT_DOMAIN, DEFAULT_SUBGROUP
from ferrymq.common.config_loader import LIVE, SECRET, check_range
from ferrymq.common.naming import camel_case
from ferrymq.common.net import local_ip
from ferrymq.common.protocol import Perm
from ferrymq.common.trace_data import DEFAULT_TRACE_TOPIC
from ferrymq.remoting.tls import ClientTls, ServerTls

log = logging.getLogger(__name__)


_PERMISSIONS = (Perm.READ, Perm.WRITE, Perm.READ_WRITE)
ASYNC_MASTER, SYNC_MASTER, SLAVE = "ASYNC_MASTER", "SYNC_MASTER", "SLAVE"
_ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)


@dataclass
class BrokerConfig:
    """Fields marked ``LIVE`` may change on a running broker (UPDATE_BROKER_CONFIG, mqadmin
    updateBrokerConfig): each is read where it is used. The rest need a restart."""

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    # Address advertised to name servers and clients. Never 0.0.0.0: in Kubernetes this is
    # the pod's stable DNS name or IP. Defaults to the bind host when that is concrete.
    broker_ip1: str = ""
    # Address the broker binds to (RocketMQ binds all interfaces; we default to loopback).
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str = ""
    broker_permission: int = field(default=Perm.READ_WRITE, metadata=LIVE)
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = field(default=True, metadata=LIVE)
    auto_create_subscription_group: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    # Message trace (docs/trace.md): the topic the official clients' enableMsgTrace writes to,
    # created at start with one queue, read-write, as Apache's TopicConfigManager does.
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = DEFAULT_TRACE_TOPIC
    # OpenTelemetry (ferrymq/broker/message_tracing.py): spans for messages that carry a trace
    # context, sent to this OTLP/HTTP traces URL (empty: off; needs the otel extra).
    otel_traces_endpoint: str = ""
    otel_service_name: str = "ferrymq-broker"
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6_000
    long_polling_enable: bool = field(default=True, metadata=LIVE)
    short_polling_time_mills: int = field(default=1_000, metadata=LIVE)
    notify_consumer_ids_changed_enable: bool = field(default=True, metadata=LIVE)
    flush_consumer_offset_interval: int = 5_000
    channel_expired_timeout: int = field(default=120_000, metadata=LIVE)
    region_id: str = field(default="DefaultRegion", metadata=LIVE)
    trace_on: bool = field(default=True, metadata=LIVE)
    max_frame_size: int = 16 * 1024 * 1024
    # A client connection with no traffic this long is closed (RocketMQ's NettyServerConfig).
    server_channel_max_idle_time_seconds: int = 120
    # Broker protection (docs/wire-format.md#broker-protection): disable a group that reads too far behind the head.
    disable_consume_if_consumer_read_slowly: bool = field(default=False, metadata=LIVE)
    consumer_fallbehind_threshold: int = field(default=16 * 1024**3, metadata=LIVE)
    # RocketMQ's fixed 3 min, configurable here; re-read every round
    protect_broker_interval_millis: int = field(default=180_000, metadata=LIVE)
    # Orderly consumers' queue locks lapse after this long without renewal.
    rebalance_lock_max_live_time: int = 60_000
    # Plain ACL (RocketMQ's aclEnable): every request signed by an account of acl_file
    # (plain_acl.yml; empty: $ROCKETMQ_HOME/conf/plain_acl.yml), re-read when it changes.
    acl_enable: bool = False
    acl_file: str = ""
    # The account this broker signs its own requests to other brokers with (Apache 5.3's
    # AuthConfig key and JSON form, {"accessKey": "...", "secretKey": "..."}; empty: unsigned).
    inner_client_authentication_credentials: str = field(default="", metadata=SECRET)
    # SQL92 subscriptions (MessageSelector.bySql), evaluated on message properties at pull time.
    enable_property_filter: bool = False
    # Transactional messages (RocketMQ 4.x): half messages are checked back with a producer
    # of their group once older than transaction_time_out (ms), every
    # transaction_check_interval (ms), at most transaction_check_max times, then discarded
    # into TRANS_CHECK_MAX_TIME_TOPIC; reject_transaction_message refuses them outright.
    transaction_time_out: int = field(default=6_000, metadata=LIVE)
    transaction_check_max: int = field(default=15, metadata=LIVE)
    transaction_check_interval: int = 60_000
    reject_transaction_message: bool = field(default=False, metadata=LIVE)
    # Recalling timer messages (RECALL_MESSAGE, gRPC RecallMessage; docs/timers.md#recall): off by
    # default, as in RocketMQ 5.3.2; allowed on a broker that takes no writes unless told otherwise.
    recall_message_enable: bool = field(default=False, metadata=LIVE)
    allow_recall_when_broker_not_writeable: bool = field(default=True, metadata=LIVE)
    # RocketMQ 5 clients (ferrymq/grpc, the grpc extra): the gRPC port, -1 off, 0 any free port
    # (Apache's proxy uses 8081). Asked for without the extra installed, the broker refuses to start.
    grpc_listen_port: int = -1
    # permissive: TLS and plaintext on the gRPC port (Java/Go/C# clients default to TLS, Python and
    # Node to plaintext); disabled: plaintext only; enforcing: TLS only. The certificate is
    # tlsServerCertPath/KeyPath's, or a self-signed one made at start.
    grpc_tls_mode: str = "permissive"
    # Without namesrvAddr: ask the address service (http://<domain>[:8080]/rocketmq/<subgroup>)
    # at start and every fetch_name_srv_addr_interval ms, as RocketMQ's broker does.
    fetch_namesrv_addr_by_address_server: bool = False
    rmq_address_server_domain: str = DEFAULT_DOMAIN
    rmq_address_server_sub_group: str = DEFAULT_SUBGROUP
    fetch_name_srv_addr_interval: int = 120_000
    # Admission control (RocketMQ's fast failure): a send is answered SYSTEM_BUSY at once when
    # the store's write queue holds send_thread_pool_queue_capacity writes, when the oldest
    # has waited wait_time_mills_in_send_queue ms, or when the running write has taken
    # os_page_cache_busy_time_out_mills ms (a stalled disk); the client tries another broker.
    broker_fast_failure_enable: bool = field(default=True, metadata=LIVE)
    wait_time_mills_in_send_queue: int = field(default=200, metadata=LIVE)
    os_page_cache_busy_time_out_mills: int = field(default=1_000, metadata=LIVE)
    send_thread_pool_queue_capacity: int = 10_000
    # FerryMQ's own: appends run on the event loop (a page-cache copy costs less than a thread
    # hand-off) until one takes longer than slow_append_mills; then, for a while, in the store's
    # writer thread so a slow disk does not stall pulls and heartbeats (store/asyncio_store.py).
    append_on_event_loop: bool = True
    slow_append_mills: int = 100
    # Replication (RocketMQ 4.x HA, broker/ha/): brokerId 0 is the master, > 0 a slave of the
    # master registered under the same brokerName. SYNC_MASTER answers a send once a slave has
    # it (FLUSH_SLAVE_TIMEOUT after syncFlushTimeout, SLAVE_NOT_AVAILABLE with no slave within
    # ha_slave_fallbehind_max bytes); a SLAVE refuses sends and copies its master's CommitLog
    # from ha_master_address, or the address the name server answers its registration with.
    broker_role: str = ASYNC_MASTER
    ha_listen_port: int = -1  # -1: listenPort + 1 (RocketMQ's); 0: any free port
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5_000  # ms
    ha_housekeeping_interval: int = 20_000  # ms without traffic before a replication link is dropped
    ha_transfer_batch_size: int = 32 * 1024
    # FerryMQ's own: an ASYNC_MASTER whose slave has caught up waits this long after new data
    # before sending it, so the puts of that while go together (one write to the slave, one
    # append there, one acknowledgement) instead of one each; nobody waits for its slave, and the
    # lag stays a few milliseconds of data (Apache's writer sleeps up to 100 ms when idle).
    # Not used by SYNC_MASTER or controller mode (puts or reads wait there); 0: send at once.
    ha_async_transfer_linger_mills: int = 5
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_synchronize_interval: int = 10_000  # ms between a slave's metadata syncs from its master
    # Failover (broker/ha/failover.py): the controller at controller_addr decides which broker of
    # the group is master; brokerRole then says how a master acknowledges (ASYNC_MASTER or
    # SYNC_MASTER) and brokerId is the broker's identity in its group (0 starts as master).
    enable_controller_mode: bool = False
    controller_addr: str = ""
    controller_heartbeat_interval: int = 1_000  # ms
    # The in-sync set (RocketMQ 5's SyncStateSet): a master takes sends only while the set, the
    # master included, has at least min_in_sync_replicas members (IN_SYNC_REPLICAS_NOT_ENOUGH);
    # a member that has not held everything the master had for ha_max_time_slave_not_catchup ms
    # (or whose connection is gone) is taken out, with the controller's consent.
    min_in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup: int = 15_000  # ms
    # Pulls whose backlog is out of memory are sent to a slave (broker/ha/reads.py).
    slave_read_enable: bool = field(default=False, metadata=LIVE)
    # Request-reply: a reply (SEND_REPLY_MESSAGE) is pushed to the requester and also stored in
    # <cluster>_REPLY_TOPIC when this is on.
    store_reply_message_enable: bool = field(default=True, metadata=LIVE)
    # TLS on the listening port (RocketMQ's tls.server.*): disabled, permissive (TLS and
    # plaintext told apart by the first byte) or enforcing; client certificates: none,
    # optional or require (checked against tls_server_trust_cert_path).
    tls_mode: str = "disabled"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""
    tls_server_need_client_auth: str = "none"
    # Seconds between looks at the certificate files (and trust CA): a renewed certificate is
    # served to new connections on the listening ports and the gRPC port without a restart
    # (remoting/cert_reload.py); 0: read once at start.
    tls_cert_reload_interval_seconds: float = 10.0
    # The broker's own connections (to name servers) over TLS; the server certificate is
    # checked against tls_client_trust_cert_path, or accepted as is when that is empty
    # (RocketMQ's tls.test.mode.enable).
    use_tls: bool = False
    tls_client_trust_cert_path: str = ""

    def __post_init__(self) -> None:
        for name in ("broker_name", "broker_cluster_name"):
            value = getattr(self, name)
            if not value or any(c.isspace() for c in value):
                raise ValueError(f"{camel_case(name)} must be a non-empty name without spaces, got {value!r}")
        if self.broker_permission not in _PERMISSIONS:
            raise ValueError(f"brokerPermission must be 2 (write), 4 (read) or 6 (read-write), "
                             f"got {self.broker_permission}")
        check_range(self, "broker_id", 0)
        if self.broker_role not in _ROLES:
            raise ValueError(f"brokerRole must be one of {', '.join(_ROLES)}, got {self.broker_role!r}")
        check_range(self, "ha_listen_port", -1, 65535)
        for name in ("ha_send_heartbeat_interval", "ha_housekeeping_interval", "ha_transfer_batch_size",
                     "ha_slave_fallbehind_max", "slave_synchronize_interval", "controller_heartbeat_interval",
                     "min_in_sync_replicas", "ha_max_time_slave_not_catchup"):
            check_range(self, name, 1)
        check_range(self, "listen_port", 0, 65535)
        check_range(self, "grpc_listen_port", -1, 65535)
        if self.grpc_tls_mode not in ("permissive", "disabled", "enforcing"):
            raise ValueError(f"grpcTlsMode must be permissive, disabled or enforcing, got {self.grpc_tls_mode!r}")
        check_range(self, "default_topic_queue_nums", 1, 1024)
        for name in ("register_name_server_period", "register_broker_timeout_mills", "short_polling_time_mills",
                     "flush_consumer_offset_interval", "channel_expired_timeout", "consumer_fallbehind_threshold",
                     "protect_broker_interval_millis", "rebalance_lock_max_live_time", "transaction_time_out",
                     "transaction_check_max", "transaction_check_interval",
                     "fetch_name_srv_addr_interval", "wait_time_mills_in_send_queue",
                     "os_page_cache_busy_time_out_mills", "send_thread_pool_queue_capacity",
                     "server_channel_max_idle_time_seconds"):
            check_range(self, name, 1)
        check_range(self, "max_frame_size", 1024)
        check_range(self, "slow_append_mills", 0)  # 0: every append counts as slow
        check_range(self, "ha_async_transfer_linger_mills", 0, 1000)
        check_range(self, "tls_cert_reload_interval_seconds", 0)
        ServerTls.check(self.tls_mode, self.tls_server_cert_path, self.tls_server_key_path,
                        self.tls_server_trust_cert_path, self.tls_server_need_client_auth)
        self.inner_credentials()

    def inner_credentials(self) -> Credentials | None:
        """``innerClientAuthenticationCredentials`` read (None: not set); ValueError if unreadable."""
        text = self.inner_client_authentication_credentials.strip()
        if not text:
            return None
        try:
            data = json.loads(text)
            return Credentials(str(data["accessKey"]), str(data["secretKey"]))
        except (ValueError, KeyError, TypeError):
            raise ValueError('innerClientAuthenticationCredentials must be {"accessKey": "...", '
                             '"secretKey": "..."}') from None

    def server_tls(self) -> ServerTls | None:
        return ServerTls.build(self.tls_mode, self.tls_server_cert_path, self.tls_server_key_path,
                               self.tls_server_trust_cert_path, self.tls_server_need_client_auth,
                               self.tls_cert_reload_interval_seconds)

    def client_tls(self) -> ClientTls | None:
        if not self.use_tls:
            return None
        trust = self.tls_client_trust_cert_path or None
        return ClientTls(ca_file=trust, insecure=trust is None)

    def advertised_host(self) -> str:
        if self.broker_ip1:
            return self.broker_ip1
        if self.listen_host not in ("", "0.0.0.0", "::"):
            return self.listen_host
        return local_ip()

    def advertised_addr(self, port: int | None = None) -> str:
        return f"{self.advertised_host()}:{port or self.listen_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == SLAVE

    def role_error(self) -> str | None:
        """Why brokerRole and brokerId do not go together (RocketMQ refuses to start then)."""
        if self.enable_controller_mode:
            if not self.controller_addr:
                return ("enableControllerMode=true needs controllerAddr (host:port of the FerryMQ controller; "
                        "several replicas separated by ';')")
            from ferrymq.broker.ha.controller_link import controller_addresses
            try:
                controller_addresses(self.controller_addr)
            except ValueError as exc:
                return str(exc)
            if self.is_slave:
                return (f"with enableControllerMode the controller picks the master: brokerRole says how a master "
                        f"acknowledges ({ASYNC_MASTER} or {SYNC_MASTER}), not {SLAVE}")
            return None
        if self.is_slave and self.broker_id <= 0:
            return f"brokerId of a slave (brokerRole={SLAVE}) must be > 0, got {self.broker_id}"
        return None

    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


def load_broker_settings(conf_file: str | None, assignments: list[str] | None,
                         overrides: dict[str, object] | None = None):
    """BrokerConfig + StoreConfig from a broker.conf, then ``--set`` pairs, then CLI flags.

    Later sources win. ``overrides`` holds values the command line set explicitly
    (RocketMQ key -> value); None values are ignored. RocketMQ keys FerryMQ does not
    implement are accepted with one warning line (a stock RocketMQ broker.conf starts).
    """
    from ferrymq.common.config_loader import load_properties_file, parse_assignments

    broker, store, ignored = build_broker_settings(
        load_properties_file(conf_file) if conf_file else {}, parse_assignments(assignments or []),
        {k: str(v) for k, v in (overrides or {}).items() if v is not None})
    if ignored:
        log.warning("RocketMQ settings FerryMQ does not implement, ignored: %s",
                    ", ".join(f"{k}={v}" for k, v in sorted(ignored.items())))
    return broker, store


def build_broker_settings(*sources: dict[str, str]):
    """Apply ``sources`` in order; returns (BrokerConfig, StoreConfig, the RocketMQ keys FerryMQ
    does not implement and skipped). Raises ConfigError for an unknown key, a bad value, or an
    unimplemented key whose value promises something FerryMQ does not do (``enableDLegerCommitLog=true``)."""
    from ferrymq.broker import rocketmq_keys
    from ferrymq.common.config_loader import ConfigError, apply_settings
    from ferrymq.store.config import StoreConfig

    broker, store = BrokerConfig(), StoreConfig(store_path_root_dir="")
    ignored: dict[str, str] = {}
    for settings in sources:
        ignored.update(apply_settings(settings, broker, store, unimplemented=rocketmq_keys.NOT_IMPLEMENTED))
    for key, value in ignored.items():
        reason = rocketmq_keys.refusal(key, value)
        if reason:
            raise ConfigError(reason)
    if broker.role_error():
        raise ConfigError(broker.role_error())
    try:
        broker.inner_credentials()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not broker.is_slave and broker.broker_id != 0 and not broker.enable_controller_mode:
        # as RocketMQ's BrokerStartup: a master is broker 0 (the controller's groups keep their ids)
        log.warning("brokerId=%d ignored: a %s is brokerId 0", broker.broker_id, broker.broker_role)
        broker.broker_id = 0
    return broker, store, ignored
