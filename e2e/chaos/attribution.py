"""Splitting one checked history into one result per fault (pure).

A run of the suite injects faults one after another while one workload runs; the checker runs
once over the whole history (an offset written before a failover and overwritten after it is
inconsistent whichever fault it falls under, so the history must not be cut before checking).
Each anomaly and each write-unavailability window is then attributed to the fault that was
active: a fault's span runs from its injection to the next fault's (the last one's to the end of
the run); before the first fault is the warm-up span.

What decides the time of each finding:

* an acknowledgement, a lost or unseen message: when it was acknowledged;
* an inconsistent offset: when the latest of the keys found there was sent (the one that took
  the offset over, after the failover);
* misplaced, corrupt, duplicated keys: when the key was sent;
* a nonmonotonic read: when it was read;
* a write-unavailability window: when it ended (writes came back). It begins at the last
  acknowledgement *before* the fault, so its start would name the previous span; the suite
  waits for writes to resume before it injects the next fault, so the end falls in the span of
  the fault that caused it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from e2e.chaos.checker import Result
from e2e.chaos.history import STORED_NOT_ACKED, History

WARM_UP = "none (before the first fault)"


@dataclass(frozen=True)
class Span:
    label: str  # the fault kind's label (the table's row)
    start: float  # s since the epoch: the fault was injected
    end: float  # the next fault's injection, or the end of the run
    time_to_ready: float | None = None  # s from injection until the group healed (None: it did not)


def spans(injections: list[tuple[str, float, float | None]], run_start: float, run_end: float) -> list[Span]:
    """The warm-up span and one span per ``(label, injected_at, time_to_ready)``, in order."""
    out = [Span(WARM_UP, run_start, injections[0][1] if injections else run_end)]
    for i, (label, at, ready) in enumerate(injections):
        end = injections[i + 1][1] if i + 1 < len(injections) else run_end
        out.append(Span(label, at, end, ready))
    return out


def attribute(result: Result, history: History, span_list: list[Span]) -> list[Result]:
    """One :class:`Result` per span of ``span_list`` (ordered, contiguous), holding what of
    ``result`` (the check of the whole ``history``) happened while its fault was active. A time
    before the first span counts in the first, after the last in the last."""
    starts = [s.start for s in span_list]
    out = [Result(fault=s.label, time_to_ready=s.time_to_ready, start=s.start, loss_allowed=result.loss_allowed)
           for s in span_list]

    def at(t: float) -> Result:
        return out[max(0, bisect.bisect_right(starts, t) - 1)]

    sent_at: dict[str, float] = {}
    for s in history.sends:
        sent_at.setdefault(s.key, s.t0)
        r = at(s.t0)
        r.attempts += 1
        if s.acked:
            at(s.t1).acknowledged += 1
        elif s.status in STORED_NOT_ACKED:
            r.stored_not_acked[s.status] = r.stored_not_acked.get(s.status, 0) + 1
        else:
            r.failed += 1
    first_read: dict[str, float] = {}
    read_at: dict[tuple[str, int], float] = {}
    for rd in history.reads:
        first_read.setdefault(rd.key, rd.t)
        read_at[(rd.consumer, rd.line)] = rd.t

    def key_time(key: str) -> float:
        return sent_at.get(key, first_read.get(key, span_list[0].start))

    for m in result.lost:
        at(m.acked_at).lost.append(m)
    for m in result.unseen:
        at(m.acked_at).unseen.append(m)
    lost_at = {m.key: m.acked_at for m in result.lost + result.unseen}
    shadows = result.loss_shadows
    for x in result.inconsistent:
        # An offset a lost message left to a later one goes with the loss (when it was
        # acknowledged), so that a fault's row sees both and tells the shadow apart.
        t = (min(lost_at[k] for k in x.keys if k in lost_at) if x in shadows
             else max(key_time(k) for k in x.keys))
        at(t).inconsistent.append(x)
    for x in result.misplaced:
        at(key_time(x.key)).misplaced.append(x)
    for x in result.corrupt:
        at(key_time(x.key)).corrupt.append(x)
    for x in result.nonmonotonic:
        at(read_at.get((x.consumer, x.line), span_list[0].start)).nonmonotonic.append(x)
    for key, positions in result.duplicates.items():
        at(key_time(key)).duplicates[key] = positions
    for w in result.windows:
        at(w.end).windows.append(w)
    return out
