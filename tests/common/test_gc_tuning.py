"""gc_tuning.settle: a started server's objects are frozen, young collections are rarer, and
reference cycles made afterwards are still collected (no leak). In a child process: the test
run's own collector settings stay as they are."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import gc, weakref
    from ferrymq.common import gc_tuning

    class Node:
        pass

    kept = [Node() for _ in range(1000)]  # what a started server holds
    gc_tuning.settle()
    assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()
    assert gc.get_threshold()[0] == gc_tuning.GEN0_THRESHOLD

    gone = []
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle made after settle
    weakref.finalize(a, gone.append, "collected")
    del a, b
    gc.collect()
    assert gone == ["collected"], gone
    print("ok")
""")


def test_settle_freezes_the_started_state_and_still_collects_new_cycles():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
