"""The recorded history of a fault-injection run: what the producers attempted and what the
consumers read (docs/chaos.md, "History").

A history is one or more JSON-lines files. Each line is one object with an ``op`` field:

* ``{"op": "send", "key", "digest", "t0", "t1", "status", "msgId", "broker", "queue", "offset",
  "error", "producer"}`` - one send attempt. ``t0``/``t1``: when it was started and answered (ms
  since the epoch). ``status``: the broker's SendStatus (``SEND_OK``, ``FLUSH_DISK_TIMEOUT``,
  ``FLUSH_SLAVE_TIMEOUT``, ``SLAVE_NOT_AVAILABLE``) or ``FAILED`` (``error`` says why; broker,
  queue and offset are then null).
* ``{"op": "recv", "key", "digest", "broker", "queue", "offset", "t", "consumer", "session",
  "reconsume"}`` - one message handed to a consumer's listener. ``session`` names the consumer's
  reading of that queue (a new one whenever the queue is (re)assigned to it; offsets may go back
  across sessions, never within one).

Other ops (``meta``, ``progress``, ...) and blank lines are ignored; a truncated last line (a
process killed while writing) is skipped and counted. Reading is the only I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

ACK = "SEND_OK"
# Stored by the master but not acknowledged as replicated/flushed: never an acknowledgement.
STORED_NOT_ACKED = frozenset({"FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})
FAILED = "FAILED"


@dataclass(frozen=True)
class Send:
    key: str
    digest: str | None
    t0: float  # seconds since the epoch: the attempt started
    t1: float  # ... and was answered (or failed)
    status: str  # SEND_OK, one of STORED_NOT_ACKED, or FAILED
    broker: str | None = None
    queue: int | None = None
    offset: int | None = None
    msg_id: str | None = None
    error: str | None = None
    code: int | None = None  # the response code of a failure, when the client had one
    producer: str = ""
    line: int = 0  # position in the producer's file (1-based), for reports

    @property
    def acked(self) -> bool:
        return self.status == ACK

    @property
    def position(self) -> tuple[str, int, int] | None:
        if self.broker is None or self.queue is None or self.offset is None:
            return None
        return (self.broker, self.queue, self.offset)


@dataclass(frozen=True)
class Read:
    key: str
    digest: str | None
    broker: str
    queue: int
    offset: int
    t: float  # seconds since the epoch
    consumer: str = ""
    session: str = ""
    reconsume: int = 0
    line: int = 0

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.broker, self.queue, self.offset)


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)  # per consumer in the order it read them
    skipped_lines: int = 0  # unparsable lines (e.g. the last line of a killed process)
    meta: list[dict] = field(default_factory=list)

    def extend(self, other: "History") -> "History":
        self.sends += other.sends
        self.reads += other.reads
        self.skipped_lines += other.skipped_lines
        self.meta += other.meta
        return self


def _seconds(value) -> float:
    """Times are written in ms since the epoch; seconds are what the checker reports."""
    return float(value) / 1000.0


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def send_from(obj: dict, producer: str = "", line: int = 0) -> Send:
    status = obj.get("status") or FAILED
    return Send(
        key=str(obj["key"]), digest=obj.get("digest"), t0=_seconds(obj["t0"]),
        t1=_seconds(obj.get("t1", obj["t0"])), status=str(status),
        broker=obj.get("broker"), queue=_int_or_none(obj.get("queue")),
        offset=_int_or_none(obj.get("offset")), msg_id=obj.get("msgId"), error=obj.get("error"),
        code=_int_or_none(obj.get("code")),
        producer=str(obj.get("producer") or producer), line=line,
    )


def read_from(obj: dict, consumer: str = "", line: int = 0) -> Read:
    return Read(
        key=str(obj["key"]), digest=obj.get("digest"), broker=str(obj["broker"]),
        queue=int(obj["queue"]), offset=int(obj["offset"]), t=_seconds(obj["t"]),
        consumer=str(obj.get("consumer") or consumer), session=str(obj.get("session") or ""),
        reconsume=int(obj.get("reconsume") or 0), line=line,
    )


def parse_lines(lines: Iterable[str], source: str = "") -> History:
    """A history out of JSON lines (``source`` names the process when the lines do not)."""
    h = History()
    for n, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
            op = obj.get("op")
            if op == "send":
                h.sends.append(send_from(obj, source, n))
            elif op == "recv":
                h.reads.append(read_from(obj, source, n))
            elif op == "meta":
                h.meta.append(obj)
        except (ValueError, KeyError, TypeError, AttributeError):
            h.skipped_lines += 1
    return h


def load(*paths: str | Path) -> History:
    """Read the JSON-lines files of one run (producers' and consumers', any order)."""
    h = History()
    for path in paths:
        p = Path(path)
        with open(p, encoding="utf-8", errors="replace") as f:
            h.extend(parse_lines(f, p.stem))
    return h
