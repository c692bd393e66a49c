"""ConsumerGroup: its typed model (``ConsumerGroup.from_resource``), the subscription-group
config to push and the protection policy.

The broker owns consumeEnable once its protection has tripped (it turns it false when a
group falls too far behind). The operator never fights that: it pushes its own value only
when the spec changes, and otherwise lets the group's policy decide what follows a trip:

- Disable: RocketMQ's behaviour. The group stays disabled until a person re-enables it,
  by setting spec.consumeEnable to false and back to true, or with the one-shot annotation
  ``ferrymq.io/enable-consume``.
- ResetToLatest: skip the backlog (offsets moved to the end of every queue), then re-enable.
- Alert: re-enable at once and keep consuming; report the fall-behind as a condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.common.consumer_protocol import ConsumerConnection
from ferrymq.common.protocol import SubscriptionGroupConfig
from ferrymq.common.validators import validate_group
from ferrymq_operator import spec_checks
from ferrymq_operator.constants import ANN_ENABLE_CONSUME
from ferrymq_operator.spec_checks import BrokerChild, SpecError
from ferrymq_operator.views import ResourceView

POLICIES = ("Disable", "ResetToLatest", "Alert")


class GroupSpecError(SpecError):
    """A ConsumerGroup's spec the operator cannot act on (the CRD's schema rejects these first;
    this guards objects stored before a rule existed and hand-made dicts)."""


def group_name(resource: dict) -> str:
    """spec.groupName, else the resource's name (read without validating it)."""
    res = ResourceView(resource)
    return res.spec.get("groupName") or res.name


@dataclass(frozen=True, kw_only=True)
class ConsumerGroup(BrokerChild):
    """The typed model of a ConsumerGroup resource: defaults applied and values checked once,
    when it is read (``from_resource``). The CRD's OpenAPI defaults fill most of these in on
    the server; repeating them here keeps the model whole for hand-written dicts."""

    group_name: str                 # the RocketMQ group: spec.groupName, else the resource's name
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    on_fall_behind: str = "Disable"  # spec.protection.onFallBehind, one of POLICIES
    spark_job: bool = False          # spec.sparkJob is set (spark_jobs reads it from the resource)

    @classmethod
    def from_resource(cls, obj: dict) -> "ConsumerGroup":
        """The model of a ConsumerGroup (a dict as kopf or the API server hands it over).
        Raises GroupSpecError naming every bad value."""
        res = ResourceView(obj)
        spec = res.spec
        errors: list[str] = []
        common = BrokerChild.common(res, errors)
        name = spec.get("groupName") or res.name
        error = validate_group(name)
        if error:
            errors.append(f"{'spec.groupName' if spec.get('groupName') else 'metadata.name'}: {error}")
        policy = (spec.get("protection") or {}).get("onFallBehind") or "Disable"
        if policy not in POLICIES:
            errors.append(f"unknown onFallBehind policy {policy!r} (one of {', '.join(POLICIES)})")
        group = cls(
            **common, group_name=name,
            consume_enable=spec_checks.bool_of(spec, "consumeEnable", True, errors),
            consume_broadcast_enable=spec_checks.bool_of(spec, "consumeBroadcastEnable", True, errors),
            retry_queue_nums=spec_checks.int_in(spec, "retryQueueNums", 1, 1, 1024, errors),
            retry_max_times=spec_checks.int_in(spec, "retryMaxTimes", 16, 0, 1000, errors),
            on_fall_behind=policy, spark_job=bool(spec.get("sparkJob")))
        spec_checks.raise_errors(errors, GroupSpecError)
        return group

    @property
    def alerting(self) -> bool:
        return self.on_fall_behind == "Alert"

    @property
    def enable_consume_requested(self) -> bool:
        """The one-shot re-enable annotation (ferrymq.io/enable-consume=true) is set."""
        return self.annotations.get(ANN_ENABLE_CONSUME, "").lower() == "true"

    def subscription(self, consume_enable: bool) -> SubscriptionGroupConfig:
        """The subscription-group config to push, with ``consume_enable`` (which protection may own)."""
        return SubscriptionGroupConfig(group_name=self.group_name, consume_enable=consume_enable,
                                       consume_broadcast_enable=self.consume_broadcast_enable,
                                       retry_queue_nums=self.retry_queue_nums, retry_max_times=self.retry_max_times)


def same_settings(a: SubscriptionGroupConfig, b: SubscriptionGroupConfig) -> bool:
    """Equal apart from consumeEnable (which protection may own)."""
    return (a.consume_broadcast_enable, a.retry_queue_nums, a.retry_max_times) == (
        b.consume_broadcast_enable, b.retry_queue_nums, b.retry_max_times)


@dataclass
class ProtectionState:
    """Kept in status.protection between reconciles."""

    tripped: bool = False          # the broker disabled the group while the spec wanted it enabled
    tripped_at: str = ""           # when the operator first saw it
    brokers: list[str] = field(default_factory=list)

    @classmethod
    def from_status(cls, status: dict | None) -> "ProtectionState":
        p = (status or {}).get("protection") or {}
        return cls(bool(p.get("tripped")), p.get("trippedAt", ""), list(p.get("brokers") or []))

    def to_status(self) -> dict:
        return {"tripped": self.tripped, "trippedAt": self.tripped_at, "brokers": sorted(self.brokers)}


@dataclass(frozen=True)
class GroupDecision:
    enable_on: list[str]           # brokers to set consumeEnable=true on
    disable_on: list[str]          # brokers to set consumeEnable=false on (spec says disabled)
    reset_to_latest: list[str]     # brokers whose offsets jump to the end before re-enabling
    state: ProtectionState
    consume_disabled: bool         # the ConsumeDisabled condition
    reason: str
    message: str
    event: tuple[str, str, str] | None = None   # (type, reason, message) on a transition
    clear_annotation: bool = False  # the one-shot re-enable annotation has been honoured


def decide(*, spec_enabled: bool, policy: str, observed: dict[str, bool], state: ProtectionState,
           enable_annotation: bool, now: str) -> GroupDecision:
    """``observed``: brokerName -> consumeEnable on that broker now."""
    if policy not in POLICIES:
        raise ValueError(f"unknown onFallBehind policy {policy!r} (one of {', '.join(POLICIES)})")
    if not spec_enabled:
        # A person disabled the group: that is theirs to own; a past trip is forgotten.
        return GroupDecision([], sorted(b for b, on in observed.items() if on), [], ProtectionState(),
                             True, "DisabledInSpec", "spec.consumeEnable is false",
                             clear_annotation=enable_annotation)
    disabled = sorted(b for b, on in observed.items() if not on)
    if not disabled:
        event = ("Normal", "ConsumeEnabled", "consumption is enabled on every broker") if state.tripped else None
        return GroupDecision([], [], [], ProtectionState(), False, "Enabled", "consumption is enabled",
                             event=event, clear_annotation=enable_annotation)
    new_trip = not state.tripped
    tripped = ProtectionState(True, state.tripped_at if state.tripped else now, sorted(set(state.brokers) | set(disabled)))
    where = ", ".join(disabled)
    if enable_annotation:
        return GroupDecision(disabled, [], [], ProtectionState(), False, "ReEnabled",
                             f"re-enabled on {where} by the {'ferrymq.io/enable-consume'} annotation",
                             event=("Normal", "ConsumeReEnabled", f"re-enabled on {where} by annotation"),
                             clear_annotation=True)
    if policy == "Disable":
        event = ("Warning", "ConsumeDisabled", f"broker protection disabled consumption on {where}") if new_trip else None
        return GroupDecision([], [], [], tripped, True, "BrokerProtection",
                             f"broker protection disabled consumption on {where}; re-enable by setting "
                             "spec.consumeEnable false then true, or annotate ferrymq.io/enable-consume=true",
                             event=event)
    if policy == "ResetToLatest":
        return GroupDecision(disabled, [], disabled, ProtectionState(), False, "BacklogSkipped",
                             f"broker protection tripped on {where}; backlog skipped and consumption re-enabled",
                             event=("Warning", "BacklogSkipped",
                                    f"broker protection tripped on {where}: offsets reset to the latest, consumption re-enabled"))
    # Alert: keep consuming; the trip stays recorded (status, FallingBehind condition) until it clears.
    event = ("Warning", "FallingBehind", f"broker protection tripped on {where}; re-enabled (policy Alert)") if new_trip else None
    return GroupDecision(disabled, [], [], tripped, False, "Alerting",
                         f"broker protection tripped on {where}; consumption re-enabled (policy Alert)", event=event)


def lag_by_topic(queue_stats: list[tuple[str, int, int | None]]) -> list[dict]:
    """(topic, messages behind, bytes behind or None) per queue -> status.lag entries."""
    totals: dict[str, list] = {}
    for topic, messages, nbytes in queue_stats:
        t = totals.setdefault(topic, [0, 0, True])
        t[0] += max(0, messages)
        if nbytes is None:
            t[2] = False
        else:
            t[1] += max(0, nbytes)
    out = []
    for topic, (messages, nbytes, bytes_known) in sorted(totals.items()):
        entry = {"topic": topic, "messages": messages}
        if bytes_known:
            entry["bytes"] = nbytes
        out.append(entry)
    return out


PROTOCOL_ORDER = ("remoting", "gRPC v2", "POP")


def online_clients(connections: ConsumerConnection | None) -> dict:
    """The group's connection list (GET_CONSUMER_CONNECTION_LIST, merged over brokers; None:
    nobody online) -> status.onlineClients: the total and the count per protocol, every
    protocol listed. A connection naming no protocol is a 4.x one (a RocketMQ broker's answer)."""
    counts = dict.fromkeys(PROTOCOL_ORDER, 0)
    for c in connections.connection_set if connections else []:
        protocol = c.protocol or "remoting"
        counts[protocol] = counts.get(protocol, 0) + 1
    return {"total": sum(counts.values()),
            "byProtocol": [{"protocol": p, "clients": n} for p, n in counts.items()]}
