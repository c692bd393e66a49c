"""``ferrymq controller``'s state backend and election flags: parsed, validated (one clear line
per mistake) and turned into the controller's state store and Lease elector.

``--state file`` (default): one controller, its state in ``--data-dir``. ``--state kubernetes``:
several replicas; the state is the ConfigMap ``--state-name`` and the leader holds the Lease
``--lease-name``, both in ``--namespace``, as ``--identity``. Defaults come from the pod (the
Downward API's POD_NAMESPACE, POD_NAME, POD_IP; else the service account's namespace or the
kubeconfig context's).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

from ferrymq.controller.controller import Controller, ControllerConfig
from ferrymq.kube.client import KubeClient
from ferrymq.kube.config import KubeConfig, KubeConfigError
from ferrymq.kube.election import LeaseElector, validate_timings

DEFAULT_NAME = "ferrymq-controller"
KUBERNETES_ONLY = ("namespace", "state_name", "lease_name", "identity", "kubeconfig", "lease_duration",
                   "renew_deadline", "retry_period")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", default="file", choices=["file", "kubernetes"],
                   help="where the epochs are kept: file (--data-dir, one controller; default) or kubernetes (a "
                        "ConfigMap changed by compare-and-swap, several replicas behind a Lease)")
    p.add_argument("--advertise-addr", default=None, metavar="HOST:PORT",
                   help="the address other replicas name to brokers when this one leads (default: $POD_IP:port, "
                        "else --host:port)")
    k = p.add_argument_group("--state kubernetes")
    k.add_argument("--namespace", default=None, help="namespace of the ConfigMap and Lease (default: $POD_NAMESPACE, "
                                                     "else the service account's or the kubeconfig context's)")
    k.add_argument("--state-name", default=None, help=f"ConfigMap holding the state (default {DEFAULT_NAME})")
    k.add_argument("--lease-name", default=None, help=f"Lease of the leader election (default {DEFAULT_NAME})")
    k.add_argument("--identity", default=None, help="this replica's name in the Lease (default: $POD_NAME, else the "
                                                    "host name)")
    k.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    k.add_argument("--lease-duration", type=float, default=None, metavar="S",
                   help="a standby takes the Lease once its holder has not renewed it this long (default 15)")
    k.add_argument("--renew-deadline", type=float, default=None, metavar="S",
                   help="the leader stops leading when it could not renew for this long (default 10)")
    k.add_argument("--retry-period", type=float, default=None, metavar="S",
                   help="seconds between attempts to take or renew the Lease (default 2)")


@dataclass(frozen=True)
class KubernetesBackend:
    namespace: str
    state_name: str
    lease_name: str
    identity: str
    kubeconfig: str | None
    lease_duration: float
    renew_deadline: float
    retry_period: float


def kubernetes_backend(args: argparse.Namespace, kube: KubeConfig | None,
                       env: Mapping[str, str] | None = None) -> KubernetesBackend:
    """The validated settings of ``--state kubernetes`` (ValueError says what is wrong).
    ``kube``: the loaded API config, whose namespace is the last default."""
    env = os.environ if env is None else env
    namespace = args.namespace or env.get("POD_NAMESPACE") or (kube.namespace if kube else "")
    if not namespace:
        raise ValueError("--state kubernetes needs --namespace (or $POD_NAMESPACE)")
    if not _DNS_LABEL.match(namespace) or len(namespace) > 63:
        raise ValueError(f"--namespace {namespace!r} is not a Kubernetes namespace name")
    names = {}
    for flag, value in (("--state-name", args.state_name), ("--lease-name", args.lease_name)):
        value = value or DEFAULT_NAME
        if not _DNS_SUBDOMAIN.match(value) or len(value) > 253:
            raise ValueError(f"{flag} {value!r} is not a Kubernetes object name (lower-case letters, digits, '-', '.')")
        names[flag] = value
    identity = args.identity or env.get("POD_NAME") or socket.gethostname()
    if not identity.strip():
        raise ValueError("--identity must not be empty")
    timings = (15.0 if args.lease_duration is None else args.lease_duration,
               10.0 if args.renew_deadline is None else args.renew_deadline,
               2.0 if args.retry_period is None else args.retry_period)
    validate_timings(*timings)
    return KubernetesBackend(namespace, names["--state-name"], names["--lease-name"], identity, args.kubeconfig,
                             *timings)


def check_flags(args: argparse.Namespace) -> None:
    """Flags of the Kubernetes backend given with ``--state file`` are a mistake, not ignored."""
    if args.state != "kubernetes":
        given = [f"--{name.replace('_', '-')}" for name in KUBERNETES_ONLY if getattr(args, name, None) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} only with --state kubernetes")


def advertise_addr(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str:
    """This replica's address for the others to name: the flag, else $POD_IP with the port, else
    the bound host (a wildcard host cannot be named: then the flag or POD_IP is required)."""
    env = os.environ if env is None else env
    if args.advertise_addr:
        host, sep, port = args.advertise_addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--advertise-addr must be host:port, got {args.advertise_addr!r}")
        return args.advertise_addr
    if args.port == 0:
        return ""  # any free port: the controller names the one it bound
    host = env.get("POD_IP") or args.host
    if host in ("0.0.0.0", "::", ""):
        if args.state == "kubernetes":
            raise ValueError("--host is a wildcard address: give --advertise-addr (or $POD_IP)")
        return ""
    return f"[{host}]:{args.port}" if ":" in host else f"{host}:{args.port}"


@dataclass
class ControllerProcess:
    """The controller and what it needs closed after it stops (the API client)."""

    controller: Controller
    kube_client: KubeClient | None = None

    async def close(self) -> None:
        if self.kube_client is not None:
            await self.kube_client.close()


def build(args: argparse.Namespace, config: ControllerConfig, env: Mapping[str, str] | None = None) -> ControllerProcess:
    """The controller of these flags; ValueError (or KubeConfigError, a ValueError) says why not."""
    check_flags(args)
    if args.state != "kubernetes":
        return ControllerProcess(Controller(config))
    from ferrymq.controller.kube_store import ConfigMapStateStore

    try:
        kube = KubeConfig.load(args.kubeconfig, env)
    except KubeConfigError as exc:
        raise ValueError(f"--state kubernetes: {exc}") from None
    backend = kubernetes_backend(args, kube, env)
    client = KubeClient(kube, timeout=max(1.0, min(5.0, backend.renew_deadline / 2)))
    elector = LeaseElector(client, backend.namespace, backend.lease_name, backend.identity,
                           lease_duration=backend.lease_duration, renew_deadline=backend.renew_deadline,
                           retry_period=backend.retry_period)
    store = ConfigMapStateStore(client, backend.namespace, backend.state_name, may_write=lambda: elector.is_leader,
                                timeout=client.timeout)
    return ControllerProcess(Controller(config, store, elector), client)
