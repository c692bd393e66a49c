"""What a console is told at start: where it listens, which clusters it shows, whether it
may change them."""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import os
import re
from dataclasses import dataclass, field

from ferrymq.client.config import ClientConfig

_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_ADDRESS = re.compile(r"[^;\s:]+:[0-9]{1,5}")


_instances = itertools.count(1)


class SettingsError(ValueError):
    """A console setting that cannot be used, with the reason."""


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster the console shows: a name of our choosing and its name servers."""

    name: str
    namesrv_addr: str  # "host:9876;host2:9876"


def parse_cluster(text: str) -> ClusterSpec:
    """``name=host:9876;host2:9876`` (the form of ``--cluster``)."""
    name, sep, addrs = text.partition("=")
    name, addrs = name.strip(), addrs.strip()
    if not sep or not name or not addrs:
        raise SettingsError(f"--cluster wants name=host:port[;host:port...], got {text!r}")
    if not _CLUSTER_NAME.fullmatch(name):
        raise SettingsError(f"cluster name {name!r}: letters, digits, '.', '_' and '-' only (at most 63)")
    parts = [a.strip() for a in addrs.split(";") if a.strip()]
    bad = [a for a in parts if not _ADDRESS.fullmatch(a) or not 0 < int(a.rsplit(":", 1)[1]) < 65536]
    if not parts or bad:
        raise SettingsError(f"cluster {name}: name server addresses must be host:port, got {', '.join(bad) or addrs!r}")
    return ClusterSpec(name, ";".join(parts))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ConsoleSettings:
    clusters: list[ClusterSpec]
    # One client configuration per cluster name (credentials and TLS as the CLI takes them).
    client_configs: dict[str, ClientConfig] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8088
    read_only: bool = True
    sample_seconds: float = 10.0  # how often the overview samples every broker
    history_minutes: float = 15.0  # how much rate history the overview keeps
    max_export: int = 100_000  # messages one export may hold at most
    accounts_file: str | None = None  # sign-in and roles (ferrymq/console/accounts.py); None: open
    audit_log: str | None = None  # a file the audit lines are appended to, besides the log
    session_idle_minutes: float = 60.0
    session_hours: float = 12.0  # a session's absolute lifetime
    secure_cookies: bool = False  # the session cookie only over HTTPS (behind a TLS Ingress)
    trace_url: str | None = None  # a trace viewer's URL with {traceId}: a message's trace id links there
    https_cert: str | None = None  # HTTPS with this certificate and https_key (reloaded when renewed)
    https_key: str | None = None
    https_reload_seconds: float = 30.0

    def __post_init__(self) -> None:
        if not self.clusters:
            raise SettingsError("at least one --cluster is needed")
        names = [c.name for c in self.clusters]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SettingsError(f"cluster names must be unique: {', '.join(duplicates)} given twice")
        if self.sample_seconds <= 0:
            raise SettingsError("--sample-seconds must be positive")
        if self.trace_url is not None and ("{traceId}" not in self.trace_url
                                           or not self.trace_url.startswith(("http://", "https://"))):
            raise SettingsError("--trace-url must be an http(s) URL holding {traceId}, e.g. "
                                "https://jaeger.example.com/trace/{traceId}")
        if bool(self.https_cert) != bool(self.https_key):
            raise SettingsError("--https-cert and --https-key go together")
        if self.https_reload_seconds <= 0:
            raise SettingsError("--https-reload-seconds must be positive")
        if self.session_idle_minutes <= 0 or self.session_hours <= 0:
            raise SettingsError("--session-idle-minutes and --session-hours must be positive")

    def client_config(self, name: str) -> ClientConfig:
        """A fresh client configuration for cluster ``name``: each client the console opens
        (admin, producer, pull) gets its own instance name, hence its own client id."""
        spec = next(c for c in self.clusters if c.name == name)
        template = self.client_configs.get(name) or ClientConfig()
        return dataclasses.replace(template, namesrv_addr=spec.namesrv_addr,
                                   instance_name=f"ferrymq-console-{os.getpid()}-{next(_instances)}")
