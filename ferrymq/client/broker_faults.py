"""Which brokers failed recently, so producers send elsewhere for a while.

RocketMQ's sendLatencyFaultEnable: a broker that failed a send (or answered very slowly)
is avoided for a period that grows with the failure's latency; once the period is over it
is tried again. When every broker is marked, the least recently failed one is used
rather than failing outright.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# (latency at least, avoid for) in seconds, as RocketMQ's latencyMax / notAvailableDuration.
LATENCY_STEPS = ((15.0, 600.0), (3.0, 180.0), (2.0, 120.0), (1.0, 60.0), (0.55, 30.0), (0.0, 0.0))
FAILURE_AVOID_SECONDS = 30.0


@dataclass
class _Fault:
    until: float
    since: float


class BrokerFaults:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._faults: dict[str, _Fault] = {}

    def record(self, broker_name: str, latency: float, failed: bool) -> None:
        if not self.enabled:
            return
        avoid = FAILURE_AVOID_SECONDS if failed else next(d for l, d in LATENCY_STEPS if latency >= l)
        now = time.monotonic()
        if avoid > 0:
            self._faults[broker_name] = _Fault(now + avoid, now)
        else:
            self._faults.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        fault = self._faults.get(broker_name)
        return fault is None or fault.until <= time.monotonic()

    def least_bad(self, broker_names: list[str]) -> str | None:
        """Among avoided brokers, the one whose avoidance ends first."""
        known = [(self._faults[b].until, b) for b in broker_names if b in self._faults]
        return min(known)[1] if known else None
