"""Client settings, with RocketMQ's defaults (ClientConfig / DefaultMQProducer)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ferrymq.acl.signature import Credentials
from ferrymq.remoting.tls import ClientTls
from ferrymq.common.config_loader import ConfigError
from ferrymq.common.net import local_ip
from ferrymq.remoting.codes import SerializeType


def default_namesrv() -> str:
    """$NAMESRV_ADDR (the variable RocketMQ's Java client reads, not ROCKETMQ_NAMESRV_ADDR);
    without it, none when an address service is named ($FERRYMQ_NAMESRV_DOMAIN), else the
    local default."""
    if os.environ.get("NAMESRV_ADDR"):
        return os.environ["NAMESRV_ADDR"]
    return "" if os.environ.get("FERRYMQ_NAMESRV_DOMAIN") else "127.0.0.1:9876"


def credentials_from_env() -> Credentials | None:
    """FERRYMQ_ACCESS_KEY / FERRYMQ_SECRET_KEY (and FERRYMQ_SECURITY_TOKEN): an ACL account."""
    access_key, secret_key = os.environ.get("FERRYMQ_ACCESS_KEY"), os.environ.get("FERRYMQ_SECRET_KEY")
    if not access_key:
        return None  # a secret alone waits for an access key given another way (the CLI's flag)
    if not secret_key:
        raise ConfigError("FERRYMQ_ACCESS_KEY is set but FERRYMQ_SECRET_KEY is not")
    return Credentials(access_key, secret_key, os.environ.get("FERRYMQ_SECURITY_TOKEN") or None)


def tls_from_env() -> ClientTls | None:
    """FERRYMQ_TLS=true (RocketMQ's -Dtls.enable=true): TLS to every server; the servers'
    certificates are checked against FERRYMQ_TLS_CA_FILE, or accepted as they are without it
    (RocketMQ's default test mode)."""
    if os.environ.get("FERRYMQ_TLS", "").strip().lower() != "true":
        return None
    ca_file = os.environ.get("FERRYMQ_TLS_CA_FILE") or None
    return ClientTls(ca_file=ca_file, insecure=ca_file is None)


@dataclass
class ClientConfig:
    namesrv_addr: str = field(default_factory=default_namesrv)
    instance_name: str = field(default_factory=lambda: f"{os.getpid()}#{id(object())}")
    client_ip: str = field(default_factory=local_ip)
    # With no namesrv_addr: the address service (rocketmq.namesrv.domain) asked at start and
    # every fetch_namesrv_interval seconds, as RocketMQ's clients do.
    namesrv_domain: str = field(default_factory=lambda: os.environ.get("FERRYMQ_NAMESRV_DOMAIN", ""))
    namesrv_domain_subgroup: str = field(
        default_factory=lambda: os.environ.get("FERRYMQ_NAMESRV_DOMAIN_SUBGROUP", "nsaddr"))
    fetch_namesrv_interval: float = 120.0
    api_timeout: float = 3.0
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    serialize_type: SerializeType = SerializeType.JSON
    # Signs every request (RocketMQ's AclClientRPCHook) when the brokers have ACL on.
    credentials: Credentials | None = field(default_factory=credentials_from_env)
    tls: ClientTls | None = field(default_factory=tls_from_env)

    @property
    def client_id(self) -> str:
        return f"{self.client_ip}@{self.instance_name}"

    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]
