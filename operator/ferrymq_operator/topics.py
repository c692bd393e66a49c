"""Topic decisions: the desired topic config, what each broker needs, conflicts between CRs."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.common.validators import validate_topic


@dataclass(frozen=True)
class DesiredTopic:
    name: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool


@dataclass(frozen=True)
class ObservedTopic:
    read_queues: int
    write_queues: int
    perm: int
    order: bool


def topic_name(resource: dict) -> str:
    return (resource.get("spec") or {}).get("topicName") or resource["metadata"]["name"]


def desired_topic(resource: dict) -> DesiredTopic:
    spec = resource.get("spec") or {}
    name = topic_name(resource)
    error = validate_topic(name)
    if error:  # the CRD's patterns reject these first; this guards hand-made objects
        raise ValueError(error)
    return DesiredTopic(name, int(spec.get("readQueueNums", 8)), int(spec.get("writeQueueNums", 8)),
                        int(spec.get("perm", 6)), bool(spec.get("order", False)))


@dataclass(frozen=True)
class BrokerAction:
    broker: str
    action: str      # "create" | "update" | "none" | "refuse"
    reason: str = ""


def plan_brokers(desired: DesiredTopic, observed: dict[str, ObservedTopic | None]) -> list[BrokerAction]:
    """Per broker (brokerName -> what it has now): create where missing, update where it
    differs, refuse to shrink queue counts (messages in the removed queues would become
    unreachable: RocketMQ allows it, we report it instead)."""
    out = []
    for broker, have in sorted(observed.items()):
        if have is None:
            out.append(BrokerAction(broker, "create"))
            continue
        shrink = [f"{label} {old} -> {new}" for label, old, new in
                  (("readQueueNums", have.read_queues, desired.read_queues),
                   ("writeQueueNums", have.write_queues, desired.write_queues)) if new < old]
        if shrink:
            out.append(BrokerAction(broker, "refuse", f"queue counts cannot decrease on {broker}: {', '.join(shrink)}"))
        elif (have.read_queues, have.write_queues, have.perm, have.order) != (
                desired.read_queues, desired.write_queues, desired.perm, desired.order):
            out.append(BrokerAction(broker, "update"))
        else:
            out.append(BrokerAction(broker, "none"))
    return out


def conflict_owner(resource: dict, others: list[dict]) -> dict | None:
    """Another Topic CR naming the same topic on the same Broker that owns it: the oldest
    (creationTimestamp, then namespace/name) wins; the others are reported as conflicts."""
    mine = (_broker_key(resource), topic_name(resource))

    def age(r: dict) -> tuple:
        m = r["metadata"]
        return (m.get("creationTimestamp") or "", m.get("namespace", ""), m["name"])

    rivals = [r for r in others if r["metadata"].get("uid") != resource["metadata"].get("uid")
              and (_broker_key(r), topic_name(r)) == mine and not r["metadata"].get("deletionTimestamp")]
    oldest = min(rivals + [resource], key=age)
    return None if oldest is resource else oldest


def _broker_key(resource: dict) -> tuple[str, str]:
    return resource["metadata"].get("namespace", ""), ((resource.get("spec") or {}).get("brokerRef") or {}).get("name", "")
