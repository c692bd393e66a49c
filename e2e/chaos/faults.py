"""The faults of the local chaos suite and their plan (pure: no process is touched here).

A plan is a list of single faults drawn from a seed: the same seed gives the same kinds, in the
same order, with the same durations. Kinds are drawn in shuffled rounds (every kind once per
round), so a plan of ``len(KINDS)`` faults or fewer never repeats a kind and a long plan holds
each kind about equally often.

What a kind does (``e2e/chaos/local_suite.py`` carries it out; "master" and "slave" are the
broker that acts so when the fault starts, by the controller's state):

* ``kill-master`` / ``kill-slave``: kill -9, down for ``hold`` s, restarted (as a pod comes back);
* ``freeze-master`` / ``freeze-slave``: SIGSTOP for ``hold`` s, then SIGCONT;
* ``kill-controller``: kill -9 of the controller, down for ``hold`` s, restarted;
* ``kill-controller+master``: both killed at once; the controller restarted after ``hold`` s,
  the broker ``hold2`` s after that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# kind -> (label in the table, hold range in s, hold2 range in s or None)
KINDS: dict[str, tuple[str, tuple[float, float], tuple[float, float] | None]] = {
    "kill-master": ("kill -9 master", (1.0, 8.0), None),
    "kill-slave": ("kill -9 slave", (1.0, 8.0), None),
    "freeze-master": ("freeze master", (2.0, 6.0), None),
    "freeze-slave": ("freeze slave", (2.0, 6.0), None),
    "kill-controller": ("kill -9 controller", (5.0, 20.0), None),
    "kill-controller+master": ("kill -9 controller+master", (3.0, 10.0), (0.0, 8.0)),
}


@dataclass(frozen=True)
class Fault:
    index: int  # 1-based position in the plan
    kind: str  # a key of KINDS
    hold: float  # s: how long the process stays down or frozen
    hold2: float = 0.0  # s: kill-controller+master only, the broker's extra time down

    @property
    def label(self) -> str:
        return KINDS[self.kind][0]


def plan(count: int, seed: int, kinds: list[str] | None = None) -> list[Fault]:
    """``count`` faults drawn from ``seed``: ``kinds`` (default every kind) in shuffled rounds,
    each with its hold times drawn in its kind's range (rounded to 0.1 s)."""
    pool = list(kinds or KINDS)
    unknown = [k for k in pool if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(KINDS)}")
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < count:
        round_ = pool[:]
        rng.shuffle(round_)
        order += round_
    faults = []
    for i, kind in enumerate(order[:count], 1):
        _, (lo, hi), second = KINDS[kind]
        hold = round(rng.uniform(lo, hi), 1)
        hold2 = round(rng.uniform(*second), 1) if second else 0.0
        faults.append(Fault(i, kind, hold, hold2))
    return faults
