"""The recall handle of a timer message (docs/timers.md#recall): RocketMQ 5.3.2's ``HandleV1``,
the words ``v1 <topic> <brokerName> <timestamp> <message id>`` joined by spaces and encoded in
URL-safe Base64. The broker issues it in a timer message's send answer; a producer gives it back
to recall the message."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

HANDLE_VERSION = "v1"
INVALID_HANDLE = "recall handle is invalid"  # Apache's remark, word for word


@dataclass(frozen=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str  # the message's due time + 1 ms, as text (Apache: its floored due time + 1)
    message_id: str  # the message's UNIQ_KEY

    def encode(self) -> str:
        raw = " ".join((HANDLE_VERSION, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode("ascii")

    @staticmethod
    def decode(text: str) -> "RecallHandle | None":
        """The handle in ``text``; None if it is not a v1 handle (Apache: "recall handle is invalid")."""
        if not text:
            return None
        try:
            data = text.encode("ascii")
            raw = base64.b64decode(data + b"=" * (-len(data) % 4), altchars=b"-_", validate=True)
        except (UnicodeEncodeError, binascii.Error, ValueError):
            return None
        items = raw.decode("utf-8", "replace").split(" ")
        while items and not items[-1]:  # Java's split drops trailing empty strings
            items.pop()
        if len(items) < 5 or items[0] != HANDLE_VERSION:
            return None
        return RecallHandle(*items[1:5])

    @property
    def due_ms(self) -> int | None:
        try:
            return int(self.timestamp) - 1
        except ValueError:
            return None


def delete_key(topic: str, message_id: str) -> str:
    """How a recall marker names the message it cancels (Apache 5.3.2's buildDeleteKey)."""
    return f"{topic}+{message_id}"
