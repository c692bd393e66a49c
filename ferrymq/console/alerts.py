"""Alerts the console derives from what it reads of a cluster: a name server that does not
answer, brokers gone from it or not answering, a broker name without a master, groups whose
consumption is disabled (broker protection, or by hand), disks above the warning ratio."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Alert:
    severity: str  # "critical" | "warning"
    kind: str
    subject: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BrokerState:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    error: str | None = None  # runtime info could not be read
    disk_ratio: float | None = None  # used / total of the store's disk
    disk_warning_ratio: float | None = None  # diskSpaceWarningLevelRatio / 100


def derive_alerts(*, namesrv_error: str | None, brokers: list[BrokerState], seen_before: set[str],
                  masters_by_name: dict[str, bool], disabled_groups: list[str]) -> list[Alert]:
    """``seen_before``: broker names this console saw registered earlier;
    ``masters_by_name``: broker name -> whether a master is registered for it."""
    if namesrv_error:
        return [Alert("critical", "namesrv-unreachable", "name servers", f"the name servers do not answer: {namesrv_error}")]
    alerts = []
    if not brokers:
        alerts.append(Alert("critical", "no-broker", "cluster", "no broker is registered with the name servers"))
    registered = {b.broker_name for b in brokers}
    for name in sorted(seen_before - registered):
        alerts.append(Alert("critical", "broker-unregistered", name,
                            f"broker {name} was registered earlier and is not any more (down, or its registration expired)"))
    for name, has_master in sorted(masters_by_name.items()):
        if not has_master:
            alerts.append(Alert("critical", "no-master", name, f"broker {name} has no master registered: no writes"))
    for b in brokers:
        who = f"{b.broker_name} ({b.address})"
        if b.error:
            alerts.append(Alert("critical", "broker-unreachable", who, f"registered but not answering: {b.error}"))
        elif b.disk_ratio is not None and b.disk_warning_ratio is not None and b.disk_ratio >= b.disk_warning_ratio:
            alerts.append(Alert("warning", "disk-above-warning", who,
                                f"disk {b.disk_ratio:.0%} used, at or above the warning ratio {b.disk_warning_ratio:.0%} "
                                "(sends are refused there)"))
    for group in sorted(disabled_groups):
        alerts.append(Alert("warning", "group-disabled", group,
                            f"group {group} may not consume (disabled by broker protection or by hand); re-enable it "
                            "on the Consumer groups page"))
    return alerts
