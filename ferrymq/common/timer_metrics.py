"""GET_TIMER_METRICS' body (Apache 5.x ``TimerMetrics.TimerMetricsSerializeWrapper``): timers
waiting per real topic. ``earliestDueMs`` is FerryMQ's addition (Apache's clients ignore it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.common.json_model import JsonModel
from ferrymq.common.protocol import DataVersion


@dataclass
class TimerMetric(JsonModel):
    count: int = 0  # timers waiting
    time_stamp: int = 0  # when the count last changed (epoch ms)
    earliest_due_ms: int = 0  # the second the first of them is due in (epoch ms)


@dataclass
class TimerMetrics(JsonModel):
    timing_count: dict[str, TimerMetric] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)
