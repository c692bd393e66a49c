"""Receipt handles: what a POP consumer gets with each message and presents to ack it or to
change its invisible time. Opaque to clients, ASCII, versioned, our own format:

    1.<queueId>.<queueOffset>.<commitLogOffset>.<attempt>.<seq>.<invisibleUntilMs>.<check>.<brokerName>

``seq`` names one delivery (or one change of invisible time) of the message: a handle whose
seq is no longer the message's current one is out of date (the message was delivered again,
or its invisible time was changed through another handle). ``check`` is a CRC32 of the other
fields with the group and topic, so a handle shown for another group or topic, or mangled on
the way, is told apart from an out-of-date one. The broker name comes last (it may contain
dots) so a gateway can route a handle to the broker that issued it without parsing the rest.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

VERSION = "1"
MAX_LENGTH = 512


@dataclass(frozen=True)
class Receipt:
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    attempt: int
    seq: int
    invisible_until_ms: int
    broker_name: str

    def _fields(self) -> str:
        return (f"{self.queue_id}.{self.queue_offset}.{self.commit_log_offset}.{self.attempt}.{self.seq}."
                f"{self.invisible_until_ms}")

    def encode(self, group: str, topic: str) -> str:
        fields = self._fields()
        return f"{VERSION}.{fields}.{_check(fields, group, topic, self.broker_name):08x}.{self.broker_name}"


def _check(fields: str, group: str, topic: str, broker_name: str) -> int:
    return zlib.crc32(f"{fields}|{group}|{topic}|{broker_name}".encode())


def decode(handle: str, group: str, topic: str) -> Receipt | None:
    """The receipt a handle names for this group and topic; None when it is malformed, of an
    unknown version, or was issued for another group or topic."""
    if not isinstance(handle, str) or not handle or len(handle) > MAX_LENGTH or not handle.isascii():
        return None
    parts = handle.split(".", 8)
    if len(parts) != 9 or parts[0] != VERSION:
        return None
    try:
        numbers = [int(p) for p in parts[1:7]]
        check = int(parts[7], 16)
    except ValueError:
        return None
    if any(n < 0 for n in numbers):
        return None
    receipt = Receipt(*numbers, broker_name=parts[8])
    if _check(receipt._fields(), group, topic, receipt.broker_name) != check:
        return None
    return receipt


def broker_of(handle: str) -> str | None:
    """The broker that issued a handle (for routing), None when it is not one of ours."""
    parts = handle.split(".", 8) if isinstance(handle, str) else []
    return parts[8] if len(parts) == 9 and parts[0] == VERSION else None
