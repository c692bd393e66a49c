"""Run the fuzz targets and report: ``python -m fuzz.run [--runs N] [--target NAME ...] [--json]``.

Each target runs as its own ``fuzz.engine`` process (atheris / libFuzzer) seeded with
well-formed inputs, keeping its corpus under ``.cache/fuzz/corpus/<target>`` between runs
so coverage accumulates. A finding (an exception outside the target's contract, a hang
past ``--timeout`` seconds per input, memory past the cap) stops that target; its input is
saved under ``.cache/fuzz/findings/<target>/`` and printed as a Python bytes literal ready
to become a regression test in tests/fuzz/test_fuzz_regressions.py.

Exit status: 0 when every target completed its runs without a finding, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fuzz.targets import TARGETS, seeds

ROOT = Path(__file__).resolve().parent.parent
_STATS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")


@dataclass
class Outcome:
    target: str
    inputs: int = 0
    coverage: int = 0  # edges reached in FerryMQ's code
    features: int = 0
    corpus: int = 0
    seconds: float = 0.0
    finding: str | None = None  # path of the input that failed
    detail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.finding is None and not self.detail


def _prepare(name: str, work: Path) -> tuple[Path, Path]:
    corpus = work / "corpus" / name
    findings = work / "findings" / name
    corpus.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds(name)):
        (corpus / f"seed-{i}").write_bytes(data)
    return corpus, findings


def run_target(name: str, runs: int, work: Path, *, max_len: int, timeout: int, progress) -> Outcome:
    corpus, findings = _prepare(name, work)
    cmd = [sys.executable, "-m", "fuzz.engine", name, f"-runs={runs}", f"-max_len={max_len}",
           f"-timeout={timeout}", "-rss_limit_mb=3072", f"-artifact_prefix={findings}/", "-print_final_stats=1",
           str(corpus)]  # fmt: skip
    outcome = Outcome(name)
    started = last_report = time.monotonic()
    tail: list[str] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            if m := _STATS.match(line):
                outcome.inputs, outcome.coverage, outcome.features, outcome.corpus = map(int, m.groups())
            elif m := _ARTIFACT.search(line):
                outcome.finding = m.group(1)
            if time.monotonic() - last_report >= 15:
                last_report = time.monotonic()
                progress(f"  {name}: {outcome.inputs:,}/{runs:,} inputs, coverage {outcome.coverage} edges")
        rc = proc.wait()
    outcome.seconds = round(time.monotonic() - started, 1)
    if rc == 0 and outcome.finding is None:
        outcome.inputs = max(outcome.inputs, runs)  # the DONE line reports the final count
    else:
        outcome.detail = [ln for ln in tail if ln and not ln.startswith("#")][-25:] or [f"exit status {rc}"]
    return outcome


def _bytes_literal(path: str) -> str:
    data = Path(path).read_bytes()
    return repr(data if len(data) <= 512 else data[:512] + b"...")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="inputs per target (default 1 000 000)")
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="only these targets (repeatable)")
    ap.add_argument("--max-len", type=int, default=4096, help="largest input in bytes")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take before it counts as a hang")
    ap.add_argument("--work-dir", type=Path, default=ROOT / ".cache" / "fuzz")
    ap.add_argument("--json", action="store_true", help="print the outcome as JSON")
    args = ap.parse_args(argv)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    outcomes = []
    for name in args.target or list(TARGETS):
        progress(f"fuzzing {name} ({TARGETS[name].what}): {args.runs:,} inputs")
        outcomes.append(run_target(name, args.runs, args.work_dir, max_len=args.max_len, timeout=args.timeout,
                                   progress=progress))
    if args.json:
        print(json.dumps([asdict(o) | {"ok": o.ok} for o in outcomes], indent=2))
    else:
        print(f"{'target':<16} {'inputs':>10} {'coverage':>9} {'features':>9} {'corpus':>7} {'seconds':>8}  result")
        for o in outcomes:
            print(f"{o.target:<16} {o.inputs:>10,} {o.coverage:>9} {o.features:>9} {o.corpus:>7} {o.seconds:>8}  "
                  f"{'ok' if o.ok else 'FINDING'}")
        for o in outcomes:
            if not o.ok:
                print(f"\n== {o.target}: " + (f"input saved as {o.finding}" if o.finding else "no input saved"))
                print("\n".join(o.detail))
                if o.finding:
                    print(f"as a regression case: ({o.target!r}, {_bytes_literal(o.finding)}),")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
