"""FerryMQ's own requests for producers that store and decide many transactional messages at
once (the Spark sink: docs/spark.md#writing-to-a-topic). RocketMQ has one half message per send
and per END_TRANSACTION; a producer handling thousands together pays a request each and, at the
broker, a put per half message and a read and two puts per decision. These carry them all
(docs/wire-format.md#transactions). A broker without them (Apache RocketMQ) answers
REQUEST_CODE_NOT_SUPPORTED: send one by one instead.

SEND_HALF_MESSAGES: SEND_BATCH_MESSAGE's header (v2 keys) and body; every message of the batch
is stored as a half message of the header's producer group (TRAN_MSG and PGROUP set by the
broker), bound for the header's topic and queue, consecutively in the half queue. The answer is a
batch send's: ``msgId`` the offset message ids, comma-separated, ``queueOffset`` the first one's
half-queue offset (the others follow it).

END_TRANSACTIONS: ext fields ``producerGroup`` and ``commitOrRollback`` (as END_TRANSACTION: 8
commit, 12 rollback, 0 unknown: nothing done); the body is JSON ``{"halves":
[[tranStateTableOffset, commitLogOffset, msgId], ...]}``, at most MAX_HALVES. The broker reads the
half messages in one go, stores the commit records in the order given with one write and the op
records with another. Answer: SUCCESS with the body ``{"failed": [[index, code, remark], ...]}``
(empty: every one is recorded), or an error code for the request as a whole (a malformed body,
too many halves). Ending a half message again is safe (a commit is stored at most once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

END_TRANSACTIONS = 9101  # FerryMQ's own range (the controller's requests are 9001-9005)
SEND_HALF_MESSAGES = 9102
MAX_HALVES = 10_000


@dataclass(frozen=True)
class HalfRef:
    """A half message as END_TRANSACTION names it."""

    tran_state_table_offset: int  # its offset in the half queue
    commit_log_offset: int
    msg_id: str = ""


@dataclass(frozen=True)
class Failure:
    index: int  # in the request's list
    code: int
    remark: str


def encode_halves(halves: list[HalfRef]) -> bytes:
    return json.dumps({"halves": [[h.tran_state_table_offset, h.commit_log_offset, h.msg_id] for h in halves]},
                      separators=(",", ":")).encode()


def decode_halves(body: bytes) -> list[HalfRef]:
    """The request's half messages; ValueError saying what is wrong with a malformed body."""
    try:
        rows = json.loads(body)["halves"]
        halves = [HalfRef(int(q), int(c), str(m)) for q, c, m in rows]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f'the body is not {{"halves": [[tranStateTableOffset, commitLogOffset, msgId], ...]}}: {e}') \
            from None
    if len(halves) > MAX_HALVES:
        raise ValueError(f"{len(halves)} half messages in one request; at most {MAX_HALVES}")
    return halves


def encode_failures(failures: list[Failure]) -> bytes:
    return json.dumps({"failed": [[f.index, f.code, f.remark] for f in failures]}, separators=(",", ":")).encode()


def decode_failures(body: bytes | None) -> list[Failure]:
    return [Failure(int(i), int(code), str(remark)) for i, code, remark in json.loads(body or b"{}").get("failed", [])]
