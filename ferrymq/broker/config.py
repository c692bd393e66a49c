"""Broker settings, named as RocketMQ names them (``brokerName`` -> ``broker_name``).

A ``broker.conf`` holds both these and the store's settings (:class:`StoreConfig`); the
one loader in :mod:`ferrymq.common.config_loader` applies each key to whichever has it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.common.net import local_ip
from ferrymq.common.protocol import Perm


@dataclass
class BrokerConfig:
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
    broker_permission: int = Perm.READ_WRITE
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6_000
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1_000
    notify_consumer_ids_changed_enable: bool = True
    flush_consumer_offset_interval: int = 5_000
    channel_expired_timeout: int = 120_000
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    max_frame_size: int = 16 * 1024 * 1024
    # Broker protection (wire facts 7.7): disable a group that reads too far behind the head.
    disable_consume_if_consumer_read_slowly: bool = False
    consumer_fallbehind_threshold: int = 16 * 1024**3
    protect_broker_interval_millis: int = 180_000  # RocketMQ's fixed 3 min, configurable here
    # Orderly consumers' queue locks lapse after this long without renewal.
    rebalance_lock_max_live_time: int = 60_000

    def advertised_host(self) -> str:
        if self.broker_ip1:
            return self.broker_ip1
        if self.listen_host not in ("", "0.0.0.0", "::"):
            return self.listen_host
        return local_ip()

    def advertised_addr(self, port: int | None = None) -> str:
        return f"{self.advertised_host()}:{port or self.listen_port}"

    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


def load_broker_settings(conf_file: str | None, assignments: list[str] | None,
                         overrides: dict[str, object] | None = None):
    """BrokerConfig + StoreConfig from a broker.conf, then ``--set`` pairs, then CLI flags.

    Later sources win. ``overrides`` holds values the command line set explicitly
    (RocketMQ key -> value); None values are ignored.
    """
    from ferrymq.common.config_loader import apply_settings, load_properties_file, parse_assignments
    from ferrymq.store.config import StoreConfig

    broker, store = BrokerConfig(), StoreConfig(store_path_root_dir="")
    if conf_file:
        apply_settings(load_properties_file(conf_file), broker, store)
    if assignments:
        apply_settings(parse_assignments(assignments), broker, store)
    if overrides:
        apply_settings({k: str(v) for k, v in overrides.items() if v is not None}, broker, store)
    return broker, store
