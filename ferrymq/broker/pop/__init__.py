"""POP consumption (RocketMQ 5's ReceiveMessage / Ack / ChangeInvisibleDuration semantics)."""

from ferrymq.broker.pop.outcomes import AckStatus, InitMode, PoppedMessage, PopResult, PopStatus
from ferrymq.broker.pop.service import PopService

__all__ = ["AckStatus", "InitMode", "PoppedMessage", "PopResult", "PopService", "PopStatus"]
