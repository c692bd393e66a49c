"""Operator settings, from environment variables (the chart sets them from values.yaml).

FERRYMQ_NAMESRV_OVERRIDES  JSON object mapping "<namespace>/<Broker name>" (or "*") to a name
                           server address list ("host:port;host:port"). Where it matches, the
                           operator's admin calls for that Broker go there instead of the
                           in-cluster name-server DNS names. For tests and for operators running
                           outside the cluster (the local control plane's pods are fake and
                           their addresses lead nowhere).
FERRYMQ_RESYNC_SECONDS     Topic/ConsumerGroup re-apply and lag-read interval (default 60).
FERRYMQ_BROKER_RESYNC_SECONDS  Broker status / restart / scale check interval (default 10).
FERRYMQ_RESTART_DRAIN_SECONDS  before restarting a broker pod, its write permission is revoked
                           and the operator waits this long (default 35: clients refresh
                           routes every 30 s) so producers have moved to the other brokers;
                           0 restarts at once.
FERRYMQ_BROKER_IMAGE       default broker image when a Broker names none.
FERRYMQ_ADMIN_TIMEOUT      seconds per admin call to a broker or name server (default 5).
FERRYMQ_WATCH_TIMEOUT      server-side watch timeout in seconds (default 300), so a silently
                           dropped watch connection is replaced instead of hanging forever.
FERRYMQ_LOG_RESYNCS        true: kopf's "Timer '...-resync' succeeded." line of every resync at
                           INFO, as kopf logs it (default false: DEBUG, see handlers.QuietResyncs).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ferrymq_operator.constants import DEFAULT_BROKER_IMAGE


@dataclass(frozen=True)
class OperatorSettings:
    namesrv_overrides: dict[str, str] = field(default_factory=dict)
    resync_seconds: float = 60.0
    broker_resync_seconds: float = 10.0
    restart_drain_seconds: float = 35.0
    broker_image: str = DEFAULT_BROKER_IMAGE
    admin_timeout: float = 5.0
    watch_timeout: int = 300
    log_resyncs: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "OperatorSettings":
        env = os.environ if env is None else env
        raw = env.get("FERRYMQ_NAMESRV_OVERRIDES", "").strip()
        try:
            overrides = json.loads(raw) if raw else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"FERRYMQ_NAMESRV_OVERRIDES is not valid JSON: {e}") from None
        if not isinstance(overrides, dict) or not all(isinstance(v, str) for v in overrides.values()):
            raise ValueError('FERRYMQ_NAMESRV_OVERRIDES must be a JSON object of strings, '
                             'e.g. {"ns/my-broker": "127.0.0.1:9876"}')
        return cls(namesrv_overrides=overrides,
                   resync_seconds=float(env.get("FERRYMQ_RESYNC_SECONDS", 60)),
                   broker_resync_seconds=float(env.get("FERRYMQ_BROKER_RESYNC_SECONDS", 10)),
                   restart_drain_seconds=float(env.get("FERRYMQ_RESTART_DRAIN_SECONDS", 35)),
                   broker_image=env.get("FERRYMQ_BROKER_IMAGE", DEFAULT_BROKER_IMAGE),
                   admin_timeout=float(env.get("FERRYMQ_ADMIN_TIMEOUT", 5)),
                   watch_timeout=int(env.get("FERRYMQ_WATCH_TIMEOUT", 300)),
                   log_resyncs=env.get("FERRYMQ_LOG_RESYNCS", "").strip().lower() == "true")

    def namesrv_addr(self, namespace: str, broker: str, in_cluster: list[str]) -> str:
        """Where admin calls for Broker ``namespace/broker`` go: an override if one matches,
        else the Broker's own name servers (their stable in-cluster DNS names)."""
        for key in (f"{namespace}/{broker}", "*"):
            if key in self.namesrv_overrides:
                return self.namesrv_overrides[key]
        return ";".join(in_cluster)
