"""The checker of the fault-injection suite: anomalies of a recorded history (docs/chaos.md).

Pure: it takes a :class:`~e2e.chaos.history.History` (``history.load(files)``) and returns a
:class:`Result`; the anomalies are those Jepsen's Kafka queue checker names:

* **lost** - acknowledged (``SEND_OK``), never read, although a later offset of the same queue
  was read;
* **unseen** - acknowledged, never read, and nothing after it in its queue was read either;
* **inconsistent** - one (broker, queue, offset) seen holding different keys (by reads, or by a
  read against the acknowledgement of a send);
* **misplaced** - an acknowledged key read, but never at the offset its acknowledgement named;
* **corrupt** - a key read with a body digest other than the one sent;
* **nonmonotonic** - within one consumer's session on a queue, an offset not above the previous;
* **poll skips** - within such a session, offsets jumped over (informative: not a failure);
* **early reads** - keys read before their send was answered (informative: a consumer may see
  what is not replicated yet, the precondition of inconsistent offsets after a failover);
* **duplicates** - one key read at several offsets (allowed: at-least-once), and redeliveries
  (one key read again at the same offset; allowed);
* **write unavailability** - the stretches between two consecutive acknowledgements in which a
  send was attempted and either did not succeed or the stretch lasted ``min_window`` seconds.

``FLUSH_SLAVE_TIMEOUT``, ``SLAVE_NOT_AVAILABLE`` and ``FLUSH_DISK_TIMEOUT`` are not
acknowledgements: such a message may or may not survive a failover. They are counted apart.

``check(..., loss_allowed=True)`` is for an ``ASYNC_MASTER`` group, which acknowledges before any
slave holds a message: lost and unseen messages, and the offsets they left to later messages
(inconsistent only with a lost acknowledgement), are counted and reported but do not make the
run invalid. ``check(..., ordered=False)`` is for a consumer with no reading of a queue of its
own (a POP consumer: the broker keeps the offsets): offsets are not checked for order.

``python -m e2e.chaos.checker FILE...`` checks one run's files and prints the anomalies and the
table row (``--json OUT`` writes the results file, see :mod:`e2e.chaos.results`).
"""

from __future__ import annotations

import argparse
import bisect
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from e2e.chaos.history import STORED_NOT_ACKED, History, Read, Send, load

Position = tuple[str, int, int]  # (broker name, queue id, queue offset)


@dataclass(frozen=True)
class Missing:
    """An acknowledged send nobody read (lost, or unseen)."""

    key: str
    position: Position
    acked_at: float  # s since the epoch
    highest_read: int | None  # the highest offset read in its queue (None: nothing read there)


@dataclass(frozen=True)
class Inconsistent:
    position: Position
    keys: tuple[str, ...]  # every key seen there, sorted
    acked: tuple[str, ...]  # those of them acknowledged at this position


@dataclass(frozen=True)
class Misplaced:
    key: str
    acked_position: Position
    read_positions: tuple[Position, ...]


@dataclass(frozen=True)
class Corrupt:
    key: str
    position: Position
    sent_digest: str
    read_digest: str


@dataclass(frozen=True)
class Nonmonotonic:
    consumer: str
    session: str
    broker: str
    queue: int
    previous: int
    offset: int
    line: int  # of the second read, in the consumer's file


@dataclass(frozen=True)
class PollSkip:
    consumer: str
    session: str
    broker: str
    queue: int
    previous: int
    offset: int  # offsets previous+1 .. offset-1 were skipped


@dataclass(frozen=True)
class Window:
    """No acknowledgement from ``start`` to ``end`` (s since the epoch) while sends were tried."""

    start: float
    end: float
    attempts: int  # attempts started in it
    not_acked: int  # of which did not end in SEND_OK
    open: bool = False  # the run ended inside it (no acknowledgement after)

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Result:
    fault: str = ""
    attempts: int = 0
    acknowledged: int = 0
    failed: int = 0
    stored_not_acked: dict[str, int] = field(default_factory=dict)  # status -> count
    errors: dict[str, int] = field(default_factory=dict)  # failure reason (first line) -> count
    reads: int = 0
    keys_read: int = 0
    unacked_read: int = 0  # keys read whose send was not acknowledged (allowed)
    early_reads: int = 0  # keys read before their send was answered (a consumer saw what was not committed yet)
    early_lead: float = 0.0  # s: the longest such lead
    lost: list[Missing] = field(default_factory=list)
    unseen: list[Missing] = field(default_factory=list)
    inconsistent: list[Inconsistent] = field(default_factory=list)
    misplaced: list[Misplaced] = field(default_factory=list)
    corrupt: list[Corrupt] = field(default_factory=list)
    nonmonotonic: list[Nonmonotonic] = field(default_factory=list)
    poll_skips: list[PollSkip] = field(default_factory=list)
    duplicates: dict[str, tuple[Position, ...]] = field(default_factory=dict)  # key -> its positions
    redeliveries: int = 0
    windows: list[Window] = field(default_factory=list)
    time_to_ready: float | None = None  # s, given by the fault harness, not the history
    start: float | None = None  # first attempt, s since the epoch
    skipped_lines: int = 0
    loss_allowed: bool = False  # ASYNC_MASTER: acknowledged loss is the documented price

    @property
    def longest_window(self) -> float:
        return max((w.seconds for w in self.windows), default=0.0)

    @property
    def window_p50(self) -> float:
        return statistics.median(w.seconds for w in self.windows) if self.windows else 0.0

    @property
    def loss_shadows(self) -> list[Inconsistent]:
        """Inconsistent offsets where the only disagreement is with acknowledged keys nobody read:
        a lost message's offset taken by a later one (at most one key read there)."""
        missing = {m.key for m in self.lost + self.unseen}
        return [x for x in self.inconsistent if missing & set(x.keys) and len(set(x.keys) - missing) <= 1]

    def failing(self) -> dict[str, list]:
        """The anomalies that make the run invalid, by kind (with :attr:`loss_allowed`, not the
        loss and its shadows)."""
        found = {name: getattr(self, name) for name in ("lost", "unseen", "inconsistent", "misplaced", "corrupt",
                                                        "nonmonotonic")}
        if self.loss_allowed:
            shadows = self.loss_shadows
            found.update(lost=[], unseen=[], inconsistent=[x for x in self.inconsistent if x not in shadows])
        return found

    @property
    def valid(self) -> bool:
        """Nothing acknowledged went missing (unless :attr:`loss_allowed`) and every offset read
        holds one thing."""
        return not any(self.failing().values())

    def problems(self) -> list[str]:
        """One line per kind of anomaly that fails the run (empty when :attr:`valid`)."""
        out = []
        for name, found in self.failing().items():
            if found:
                out.append(f"{len(found)} {name}: {', '.join(map(str, found[:5]))}"
                           f"{' ...' if len(found) > 5 else ''}")
        return out

    def summary(self) -> dict:
        """The figures (no per-message lists but the first anomalies), for a results file."""
        return {
            "fault": self.fault, "valid": self.valid, "attempts": self.attempts,
            "acknowledged": self.acknowledged, "failed": self.failed,
            "stored_not_acked": self.stored_not_acked, "errors": self.errors, "reads": self.reads,
            "keys_read": self.keys_read, "unacked_read": self.unacked_read, "early_reads": self.early_reads,
            "early_lead_s": round(self.early_lead, 3),
            "lost": len(self.lost), "unseen": len(self.unseen),
            "inconsistent": len(self.inconsistent), "misplaced": len(self.misplaced),
            "corrupt": len(self.corrupt), "nonmonotonic": len(self.nonmonotonic),
            "poll_skips": len(self.poll_skips), "duplicates": len(self.duplicates),
            "redeliveries": self.redeliveries,
            "loss_allowed": self.loss_allowed, "loss_shadows": len(self.loss_shadows),
            "unavailability_s": {"longest": round(self.longest_window, 3),
                                 "p50": round(self.window_p50, 3),
                                 "windows": [{"from_s": round(w.start - (self.start or w.start), 3),
                                              "seconds": round(w.seconds, 3), "attempts": w.attempts,
                                              "not_acked": w.not_acked, "open": w.open}
                                             for w in self.windows]},
            "time_to_ready_s": self.time_to_ready,
            "skipped_lines": self.skipped_lines,
            "first_anomalies": {name: [asdict(x) for x in getattr(self, name)[:20]]
                                for name in ("lost", "unseen", "inconsistent", "misplaced", "corrupt",
                                             "nonmonotonic")
                                if getattr(self, name)},
        }


def check(history: History, *, fault: str = "", time_to_ready: float | None = None,
          min_window: float = 1.0, loss_allowed: bool = False, ordered: bool = True) -> Result:
    """Every anomaly of ``history`` (see the module doc)."""
    r = Result(fault=fault, time_to_ready=time_to_ready, skipped_lines=history.skipped_lines,
               loss_allowed=loss_allowed)
    sends, reads = history.sends, history.reads
    r.attempts = len(sends)
    r.reads = len(reads)
    r.start = min((s.t0 for s in sends), default=None)
    acked: dict[str, Send] = {}
    sent_digest: dict[str, str] = {}
    stored = Counter()
    errors = Counter()
    for s in sends:
        if s.digest:
            sent_digest[s.key] = s.digest
        if s.acked:
            acked[s.key] = s
        elif s.status in STORED_NOT_ACKED:
            stored[s.status] += 1
        else:
            r.failed += 1
            errors[error_kind(s)] += 1
    r.acknowledged = len(acked)
    r.stored_not_acked = dict(stored)
    r.errors = dict(errors.most_common())

    # What was read where.
    read_positions: dict[str, set[Position]] = defaultdict(set)
    seen_at: dict[Position, set[str]] = defaultdict(set)
    highest: dict[tuple[str, int], int] = {}
    seen_pairs: set[tuple[str, Position]] = set()
    keys_read: set[str] = set()
    answered = {s.key: s.t1 for s in sends}
    early: set[str] = set()
    for rd in reads:
        keys_read.add(rd.key)
        lead = answered.get(rd.key, rd.t) - rd.t
        if lead > 0:
            early.add(rd.key)
            r.early_lead = max(r.early_lead, lead)
        if rd.reconsume:  # a redelivery through the retry topic: its offset is the retry queue's
            continue
        pos = rd.position
        if (rd.key, pos) in seen_pairs:
            r.redeliveries += 1
        seen_pairs.add((rd.key, pos))
        read_positions[rd.key].add(pos)
        seen_at[pos].add(rd.key)
        q = (rd.broker, rd.queue)
        highest[q] = max(highest.get(q, -1), rd.offset)
        want = sent_digest.get(rd.key)
        if want and rd.digest and rd.digest != want:
            r.corrupt.append(Corrupt(rd.key, pos, want, rd.digest))
    r.keys_read = len(keys_read)
    r.early_reads = len(early)
    r.unacked_read = sum(1 for k in keys_read if k not in acked and k in sent_digest)

    # Lost / unseen / misplaced, and the acknowledged positions for the inconsistency check.
    acked_at: dict[Position, set[str]] = defaultdict(set)
    for key, s in sorted(acked.items(), key=lambda kv: kv[1].t1):
        pos = s.position
        if pos is None:
            continue
        acked_at[pos].add(key)
        got = read_positions.get(key)
        if key not in keys_read:
            top = highest.get((pos[0], pos[1]))
            m = Missing(key, pos, s.t1, top)
            (r.lost if top is not None and top > pos[2] else r.unseen).append(m)
        elif got and pos not in got:
            r.misplaced.append(Misplaced(key, pos, tuple(sorted(got))))
    for pos in sorted(set(seen_at) | set(acked_at)):
        keys = seen_at.get(pos, set()) | acked_at.get(pos, set())
        if len(keys) > 1:
            r.inconsistent.append(Inconsistent(pos, tuple(sorted(keys)), tuple(sorted(acked_at.get(pos, ())))))
    r.duplicates = {k: tuple(sorted(p)) for k, p in read_positions.items() if len(p) > 1}

    if ordered:
        r.nonmonotonic, r.poll_skips = _order(reads)
    r.windows = unavailability(sends, min_window)
    return r


def error_kind(s: Send) -> str:
    """A failure's reason without what varies per attempt ("cost [3]ms", "Send [1] times")."""
    text = re.sub(r"\[\d+\]", "[N]", (s.error or s.status or "?").splitlines()[0])[:160]
    return f"code {s.code}: {text}" if s.code else text


def _order(reads: list[Read]) -> tuple[list[Nonmonotonic], list[PollSkip]]:
    """Offsets per (consumer, session, queue) in the order the consumer read them."""
    last: dict[tuple[str, str, str, int], int] = {}
    nonmono, skips = [], []
    for rd in reads:
        if rd.reconsume:
            continue
        k = (rd.consumer, rd.session, rd.broker, rd.queue)
        prev = last.get(k)
        if prev is not None:
            if rd.offset <= prev:
                nonmono.append(Nonmonotonic(rd.consumer, rd.session, rd.broker, rd.queue, prev, rd.offset, rd.line))
            elif rd.offset > prev + 1:
                skips.append(PollSkip(rd.consumer, rd.session, rd.broker, rd.queue, prev, rd.offset))
        last[k] = rd.offset  # consecutive reads are compared: a rewind of n offsets is one anomaly
    return nonmono, skips


def unavailability(sends: list[Send], min_window: float = 1.0) -> list[Window]:
    """The stretches between consecutive acknowledgements (by when they were answered) in which
    some attempt started and either one of those attempts was not acknowledged or the stretch
    lasted ``min_window`` s or more. Before the first acknowledgement nothing counts (start-up is
    not an outage) unless nothing was ever acknowledged; after the last one, attempts that were
    not acknowledged make an open window up to the last answer."""
    if not sends:
        return []
    ack_times = sorted(s.t1 for s in sends if s.acked)
    end_of_run = max(s.t1 for s in sends)
    if not ack_times:
        return [Window(min(s.t0 for s in sends), end_of_run, len(sends), len(sends), open=True)]
    gaps: dict[int, list[Send]] = defaultdict(list)  # index of the ack that ends the gap -> attempts
    for s in sends:
        i = bisect.bisect_right(ack_times, s.t0)  # first ack answered after this attempt started
        if i == 0:
            continue  # before the first acknowledgement
        gaps[i].append(s)
    out = []
    for i, attempts in sorted(gaps.items()):
        start = ack_times[i - 1]
        is_open = i == len(ack_times)
        end = end_of_run if is_open else ack_times[i]
        not_acked = sum(1 for s in attempts if not s.acked)
        if is_open and not not_acked:
            continue  # the run simply ended
        if not_acked or end - start >= min_window:
            out.append(Window(start, end, len(attempts), not_acked, is_open))
    return out


# --------------------------------------------------------------------------------------------
# The table: one row per fault kind


@dataclass
class Row:
    fault: str
    runs: int
    acknowledged: int
    lost: int
    unseen: int
    inconsistent: int
    nonmonotonic: int
    duplicates: int
    unavailable_p50: float  # s: median over runs of each run's longest window
    unavailable_max: float
    ready_p50: float | None  # s: time until every pod was Ready again
    ready_max: float | None
    valid: bool


def rows(results: list[Result]) -> list[Row]:
    by_fault: dict[str, list[Result]] = defaultdict(list)
    for res in results:
        by_fault[res.fault or "-"].append(res)
    out = []
    for fault, rs in by_fault.items():
        longest = [x.longest_window for x in rs]
        ready = [x.time_to_ready for x in rs if x.time_to_ready is not None]
        out.append(Row(
            fault=fault, runs=len(rs), acknowledged=sum(x.acknowledged for x in rs),
            lost=sum(len(x.lost) for x in rs), unseen=sum(len(x.unseen) for x in rs),
            inconsistent=sum(len(x.inconsistent) for x in rs),
            nonmonotonic=sum(len(x.nonmonotonic) for x in rs),
            duplicates=sum(len(x.duplicates) for x in rs),
            unavailable_p50=statistics.median(longest), unavailable_max=max(longest),
            ready_p50=statistics.median(ready) if ready else None, ready_max=max(ready) if ready else None,
            valid=all(x.valid for x in rs),
        ))
    return out


_COLUMNS = (("fault", 22), ("runs", 5), ("acked", 8), ("lost", 5), ("unseen", 6), ("incons", 6),
            ("nonmono", 7), ("dups", 5), ("unavail p50/max s", 18), ("ready p50/max s", 16), ("ok", 3))


def _pair(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a:.1f}/{b:.1f}"


def table(results: list[Result]) -> str:
    """The suite's table: a header and one row per fault kind."""
    found = rows(results)
    widths = [max([w, *(len(r.fault) for r in found)]) if name == "fault" else w for name, w in _COLUMNS]
    lines = ["  ".join(name.ljust(w) for (name, _), w in zip(_COLUMNS, widths)).rstrip()]
    for row in found:
        cells = (row.fault, row.runs, row.acknowledged, row.lost, row.unseen, row.inconsistent, row.nonmonotonic,
                 row.duplicates, _pair(row.unavailable_p50, row.unavailable_max), _pair(row.ready_p50, row.ready_max),
                 "yes" if row.valid else "NO")
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    return "\n".join(lines)


def report(result: Result) -> str:
    """A few lines on one run: counts, anomalies, windows."""
    lines = [
        f"{result.fault or 'run'}: {result.attempts} attempts, {result.acknowledged} acknowledged, "
        f"{result.failed} failed, stored not acknowledged {result.stored_not_acked or 0}; "
        f"{result.reads} reads of {result.keys_read} keys ({result.unacked_read} not acknowledged, "
        f"{result.early_reads} before their send was answered, by up to {result.early_lead:.3f} s), "
        f"{len(result.duplicates)} duplicated keys, {result.redeliveries} redeliveries, "
        f"{len(result.poll_skips)} poll skips",
        f"lost {len(result.lost)}, unseen {len(result.unseen)}, inconsistent {len(result.inconsistent)}, "
        f"misplaced {len(result.misplaced)}, corrupt {len(result.corrupt)}, "
        f"nonmonotonic {len(result.nonmonotonic)}: {'valid' if result.valid else 'INVALID'}"
        + (f" (loss allowed: {len(result.lost) + len(result.unseen)} acknowledged messages lost, "
           f"{len(result.loss_shadows)} of their offsets taken by later messages)" if result.loss_allowed else ""),
    ]
    lines += [f"  {p}" for p in result.problems()]
    for w in result.windows:
        since = w.start - (result.start or w.start)
        lines.append(f"  no acknowledgement for {w.seconds:.2f} s from +{since:.2f} s "
                     f"({w.attempts} attempts, {w.not_acked} not acknowledged{', open' if w.open else ''})")
    if result.errors:
        lines.append("  errors: " + "; ".join(f"{n}x {e}" for e, n in list(result.errors.items())[:5]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.chaos.checker", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="the run's JSON-lines files (producers' and consumers')")
    ap.add_argument("--fault", default="", help="the fault kind, for the table row")
    ap.add_argument("--time-to-ready", type=float, default=None, help="seconds, measured by the harness")
    ap.add_argument("--min-window", type=float, default=1.0)
    ap.add_argument("--json", default=None, help="write a results file (commit and machine included)")
    args = ap.parse_args(argv)
    result = check(load(*args.files), fault=args.fault, time_to_ready=args.time_to_ready,
                   min_window=args.min_window)
    print(report(result))
    print()
    print(table([result]))
    if args.json:
        from e2e.chaos.results import write_results
        write_results(args.json, [result])
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
