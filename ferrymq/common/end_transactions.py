"""END_TRANSACTIONS: FerryMQ's own request that commits or rolls back many half messages of one
producer group at once (docs/wire-format.md#transactions). RocketMQ has only END_TRANSACTION, one
half message per request; a producer that decides thousands together (the Spark sink commits a
whole batch) pays a request and, at the broker, a read and two puts per message. This request
carries them all: the broker reads the half messages in one go, stores the commit records with one
write and the op records with another, and answers which ones it could not record.

Request: code END_TRANSACTIONS; ext fields ``producerGroup`` and ``commitOrRollback`` (as
END_TRANSACTION: 8 commit, 12 rollback, 0 unknown: nothing done); the body is JSON
``{"halves": [[tranStateTableOffset, commitLogOffset, msgId], ...]}``, at most MAX_HALVES.
Answer: SUCCESS with the body ``{"failed": [[index, code, remark], ...]}`` (empty: every one is
recorded), or an error code for the request as a whole (a malformed body, too many halves). A
broker without it (Apache RocketMQ) answers REQUEST_CODE_NOT_SUPPORTED: send END_TRANSACTION per
half message instead. Ending a half message again is safe (a commit is stored at most once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

END_TRANSACTIONS = 9101  # FerryMQ's own range (the controller's requests are 9001-9005)
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
