"""Topic: its typed model (``Topic.from_resource``), the desired topic config, what each broker
needs, conflicts between Topic resources naming the same broker-side topic."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.common.validators import validate_topic
from ferrymq_operator import spec_checks
from ferrymq_operator.spec_checks import BrokerChild, SpecError
from ferrymq_operator.views import ResourceView

PERMS = (2, 4, 6)  # write-only, read-only, read+write (the CRD's enum)


class TopicSpecError(SpecError):
    """A Topic's spec the operator cannot act on (the CRD's schema rejects these first; this
    guards objects stored before a rule existed and hand-made dicts)."""


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
    """spec.topicName, else the resource's name (read without validating it)."""
    res = ResourceView(resource)
    return res.spec.get("topicName") or res.name


@dataclass(frozen=True, kw_only=True)
class Topic(BrokerChild):
    """The typed model of a Topic resource: defaults applied and values checked once, when it
    is read (``from_resource``). The CRD's OpenAPI defaults fill these in on the server;
    repeating them keeps the model whole for hand-written dicts."""

    topic_name: str                 # the RocketMQ topic: spec.topicName, else the resource's name
    read_queues: int = 8
    write_queues: int = 8
    perm: int = 6                   # one of PERMS
    order: bool = False

    @classmethod
    def from_resource(cls, obj: dict) -> "Topic":
        """The model of a Topic (a dict as kopf or the API server hands it over). Raises
        TopicSpecError naming every bad value."""
        res = ResourceView(obj)
        spec = res.spec
        errors: list[str] = []
        common = BrokerChild.common(res, errors)
        name = topic_name(obj)
        error = validate_topic(name)
        if error:
            errors.append(f"{'spec.topicName' if spec.get('topicName') else 'metadata.name'}: {error}")
        topic = cls(
            **common, topic_name=name,
            read_queues=spec_checks.int_in(spec, "readQueueNums", 8, 1, 1024, errors),
            write_queues=spec_checks.int_in(spec, "writeQueueNums", 8, 1, 1024, errors),
            perm=spec_checks.one_of(spec.get("perm", 6), PERMS, "spec.perm", errors),
            order=spec_checks.bool_of(spec, "order", False, errors))
        spec_checks.raise_errors(errors, TopicSpecError)
        return topic

    @property
    def desired(self) -> DesiredTopic:
        """The topic config every broker of the Broker should have."""
        return DesiredTopic(self.topic_name, self.read_queues, self.write_queues, self.perm, self.order)


def desired_topic(resource: dict) -> DesiredTopic:
    """The desired topic config of a Topic resource (TopicSpecError, a ValueError, if invalid)."""
    return Topic.from_resource(resource).desired


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
    mine = _topic_key(resource)

    def age(r: dict) -> tuple:
        v = ResourceView(r)
        return (v.creation_timestamp, v.namespace, v.name)

    uid = ResourceView(resource).uid
    rivals = [r for r in others if ResourceView(r).uid != uid and _topic_key(r) == mine and not ResourceView(r).deleting]
    oldest = min(rivals + [resource], key=age)
    return None if oldest is resource else oldest


def _topic_key(resource: dict) -> tuple[str, str, str]:
    """(namespace, Broker, broker-side topic): Topics with the same key manage the same topic."""
    res = ResourceView(resource)
    return res.namespace, res.broker_ref, topic_name(resource)
