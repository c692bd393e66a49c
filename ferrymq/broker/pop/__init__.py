"""POP consumption (RocketMQ 5's ReceiveMessage / Ack / ChangeInvisibleDuration semantics)."""

from ferrymq.broker.pop.service import (AckStatus, InitMode, PoppedMessage, PopResult, PopService,
                                        PopStatus)

__all__ = ["AckStatus", "InitMode", "PoppedMessage", "PopResult", "PopService", "PopStatus"]
