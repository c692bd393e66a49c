"""The POP service's vocabulary: what a receive returns, what an ack answers, where a new
group starts, and the counters the metrics read."""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field

from ferrymq.common.message import MessageExt

__all__ = ["AckStatus", "InitMode", "PopCounters", "PopResult", "PopStatus", "PoppedMessage"]


@dataclass(frozen=True)
class PoppedMessage:
    message: MessageExt  # as the pull path decodes it; reconsume_times = delivery_attempt - 1
    receipt_handle: str  # opaque to clients, ASCII, versioned (pop/receipt.py)
    delivery_attempt: int  # 1 on first delivery, +1 on every redelivery
    invisible_until_ms: int  # epoch ms when it becomes visible again unless acked


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    POLLING_FULL = "POLLING_FULL"
    REFUSED = "REFUSED"


@dataclass(frozen=True)
class PopResult:
    status: PopStatus
    messages: list[PoppedMessage]
    remark: str = ""  # why, for REFUSED
    refused_code: int = 0  # REFUSED: RocketMQ's ResponseCode for it (TOPIC_NOT_EXIST, NO_PERMISSION, ...)


class AckStatus(enum.Enum):
    OK = "OK"
    INVALID_HANDLE = "INVALID_HANDLE"  # malformed, another group's/topic's, or never issued here
    EXPIRED = "EXPIRED"  # out of date: the message was delivered again, or its invisible time changed


class InitMode(enum.IntEnum):
    """Where a group that never consumed a queue starts (PopMessageRequestHeader.initMode)."""

    MIN = 0  # the queue's first message still stored
    MAX = 1  # only messages stored from now on


@dataclass
class PopCounters:
    received: int = 0  # messages delivered for the first time
    redelivered: int = 0
    acked: int = 0
    changed: int = 0  # invisible times changed
    dead_lettered: int = 0
    refused_handles: int = 0  # acks/changes answered INVALID_HANDLE or EXPIRED
    receives: int = 0  # receive calls
    by_topic: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
