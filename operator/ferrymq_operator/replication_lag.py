"""Which slave pod each replication link a master reports belongs to, and how far behind it is.

A master knows its slaves only as the addresses they connect from (the RocketMQ HA protocol
carries offsets, no names), so a link is matched to the slave pod with that IP. A group
with one slave pod whose master reports exactly one link that matches no pod IP gets that
link too: a proxy or sidecar in between can hide the pod's address, and the one slave of
the group is the only one that connects there. Anything else stays unknown (None): a slave
not connected, a master that could not be asked. Pure functions over plain pod dicts; which
pod is the master and which are its slaves is replication_roles' decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ferrymq_operator.broker_admin import SlaveLag
from ferrymq_operator.views import PodView


@dataclass(frozen=True)
class GroupLag:
    """One broker group: its master pod and each slave pod's lag (None: unknown)."""

    master: str
    slaves: dict[str, SlaveLag | None]

    def behind(self, max_bytes: int) -> dict[str, int | None]:
        """Slave pods not known to be within ``max_bytes`` of the master (None: unknown), and
        with failover those outside the controller's in-sync set however close they are: the
        master's restart would leave the group no broker the controller may promote."""
        return {pod: (lag.bytes if lag is not None else None) for pod, lag in self.slaves.items()
                if lag is None or lag.bytes > max_bytes or lag.in_sync is False}

    def in_sync(self, max_bytes: int) -> bool:
        return not self.behind(max_bytes)


def _host(address: str) -> str:
    host = address.rpartition(":")[0].strip("[]")
    return host.removeprefix("::ffff:")  # an IPv4 peer on a dual-stack socket


def pod_ips(pod: dict | None) -> set[str]:
    return PodView.of(pod).ips


def match_links(slave_pods: Mapping[str, dict | None], links: list[SlaveLag] | None) -> dict[str, SlaveLag | None]:
    """Slave pod name -> its link's lag, for one group (``slave_pods``: every slave pod the
    group should have, None for one not created yet; ``links``: what the master reported,
    None when it could not be asked)."""
    out: dict[str, SlaveLag | None] = {name: None for name in slave_pods}
    if not links:
        return out
    unmatched = list(links)
    for name, pod in slave_pods.items():
        ips = pod_ips(pod)
        link = next((link for link in unmatched if _host(link.address) in ips), None)
        if link is not None:
            out[name] = link
            unmatched.remove(link)
    if len(slave_pods) == 1 and len(links) == 1 and unmatched:
        only = next(iter(slave_pods))
        if slave_pods[only] is not None:
            out[only] = unmatched[0]
    return out
