"""Client settings, with RocketMQ's defaults (ClientConfig / DefaultMQProducer)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ferrymq.common.net import local_ip
from ferrymq.remoting.codes import SerializeType


def default_namesrv() -> str:
    # The same variable RocketMQ's Java client reads (not ROCKETMQ_NAMESRV_ADDR).
    return os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")


@dataclass
class ClientConfig:
    namesrv_addr: str = field(default_factory=default_namesrv)
    instance_name: str = field(default_factory=lambda: f"{os.getpid()}#{id(object())}")
    client_ip: str = field(default_factory=local_ip)
    api_timeout: float = 3.0
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def client_id(self) -> str:
        return f"{self.client_ip}@{self.instance_name}"

    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]
