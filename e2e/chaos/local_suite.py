"""`make chaos` on local processes: one replicated group (name server, controller, two brokers
in controller mode on 127.0.0.1), the Java workload running throughout, and a seeded sequence of
single faults (e2e/chaos/faults.py), the group healing between them.

    python -m e2e.chaos.local_suite --faults 30 --seed 1 --role SYNC_MASTER \\
        --results bench/results/chaos-local-sync.json

For each fault: inject it (which broker is "master" is asked of the controller at that moment),
hold it, undo it (restart, SIGCONT), then wait until the group healed (every process running, a
master, the other broker following it and in the controller's in-sync set; a broker that exited
on its own, e.g. an old master told of a higher epoch, is restarted as a pod would be) and until
writes are acknowledged again, each with a deadline. A fault whose group does not heal in time is
reported so and the run goes on. One line per fault.

At the end the producer stops, the consumer reads what it can, the checker runs once over the
whole history and its findings are attributed to the fault that was active
(e2e/chaos/attribution.py); one table (per fault kind) and the JSON results file. The histories,
logs and data stay in the work directory. Exit status 1 when a fault did not heal, or under
SYNC_MASTER when the checker found anything (under ASYNC_MASTER loss is the documented price:
reported, not failing).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from e2e.chaos.attribution import attribute, spans
from e2e.chaos.checker import Result, check, report, table
from e2e.chaos.faults import KINDS, Fault, plan
from e2e.chaos.group import BROKER_IDS, LocalGroup
from e2e.chaos.history import load
from e2e.chaos.results import REPO, write_results
from e2e.chaos.workload import AckFollower, JavaWorkload, drain, start_consumer, start_producer

TOPIC = "ChaosTopic"
POLL = 0.25  # s between looks at other processes' state


@dataclass
class FaultRecord:
    fault: Fault
    targets: list[str] = field(default_factory=list)  # the processes it hit
    injected_at: float = 0.0  # s since the epoch
    heal_s: float | None = None  # from injection until the group healed (None: it did not)
    not_healed: str | None = None  # why, at the deadline
    resumed_s: float | None = None  # from injection until writes were acknowledged again
    notes: list[str] = field(default_factory=list)  # restarts of processes that exited, failures to start

    def summary(self) -> dict:
        return {"index": self.fault.index, "kind": self.fault.kind, "label": self.fault.label,
                "hold_s": self.fault.hold, "hold2_s": self.fault.hold2, "targets": self.targets,
                "injected_at": self.injected_at, "heal_s": self.heal_s, "not_healed": self.not_healed,
                "writes_resumed_s": self.resumed_s, "notes": self.notes}


@dataclass
class SuiteRun:
    role: str
    seed: int
    work: Path
    records: list[FaultRecord]
    overall: Result  # the check of the whole history
    results: list[Result]  # per span: warm-up, then one per fault
    drained: bool

    @property
    def unhealed(self) -> list[FaultRecord]:
        return [r for r in self.records if r.heal_s is None]

    @property
    def ok(self) -> bool:
        return not self.unhealed and (self.overall.valid or self.role != "SYNC_MASTER")


def hold(seconds: float) -> None:
    """The fault's duration: a process stays down or frozen this long (not a synchronisation)."""
    time.sleep(seconds)


def _shown(name: str) -> str:
    """A process as the progress line names it: the brokers by brokerId (roles change)."""
    return f"broker {BROKER_IDS[name]}" if name in BROKER_IDS else name


def _restart(group: LocalGroup, name: str, record: FaultRecord) -> None:
    try:
        group.restart(name)
    except RuntimeError as e:  # the heal loop tries again
        record.notes.append(f"{_shown(name)} did not start: {str(e).splitlines()[0]}")


def carry_out(group: LocalGroup, fault: Fault, record: FaultRecord) -> None:
    """Inject ``fault``, hold it, undo it."""
    kind = fault.kind
    if kind in ("kill-master", "kill-slave", "freeze-master", "freeze-slave"):
        action, role = kind.split("-")
        name = group.acting(role)
        record.targets = [name]
        record.injected_at = time.time()
        if action == "kill":
            group.kill(name)
            hold(fault.hold)
            _restart(group, name, record)
        else:
            group.freeze(name)
            hold(fault.hold)
            group.thaw(name)
    elif kind == "kill-controller":
        record.targets = ["controller"]
        record.injected_at = time.time()
        group.kill("controller")
        hold(fault.hold)
        _restart(group, "controller", record)
    elif kind == "kill-controller+master":
        name = group.acting("master")
        record.targets = ["controller", name]
        record.injected_at = time.time()
        group.kill("controller")
        group.kill(name)
        hold(fault.hold)
        _restart(group, "controller", record)
        hold(fault.hold2)
        _restart(group, name, record)
    else:
        raise ValueError(f"unknown fault kind {kind}")


def heal(group: LocalGroup, record: FaultRecord, deadline_s: float) -> None:
    """Wait until the group healed, restarting a process that exited meanwhile; sets
    ``record.heal_s`` or, at the deadline, ``record.not_healed``."""
    deadline = time.monotonic() + deadline_s
    while True:
        for name in list(group.pair.processes):
            if not group.running(name) and name not in group.frozen:
                record.notes.append(f"{_shown(name)} exited ({group.exit_code(name)}), restarted")
                _restart(group, name, record)
        reason = group.unhealthy()
        if reason is None:
            record.heal_s = round(time.time() - record.injected_at, 2)
            return
        if time.monotonic() > deadline:
            record.not_healed = reason
            return
        time.sleep(POLL)  # polling other processes' state


def writes_resumed(acks: AckFollower, record: FaultRecord, count: int, deadline_s: float) -> None:
    """Wait for ``count`` acknowledgements answered after the group healed."""
    since = record.injected_at + (record.heal_s or 0)
    deadline = time.monotonic() + deadline_s
    while acks.count(since) < count:
        if time.monotonic() > deadline:
            record.notes.append(f"fewer than {count} sends acknowledged {deadline_s:.0f} s after healing")
            return
        time.sleep(POLL)  # polling the producer's file
    later = [t for t in acks.ack_times if t > record.injected_at]
    record.resumed_s = round(later[0] - record.injected_at, 2) if later else None


def progress_line(record: FaultRecord, total: int, acked: int) -> str:
    f = record.fault
    held = f"{f.hold:.1f} s" + (f" + {f.hold2:.1f} s" if f.hold2 else "")
    healed = (f"healed in {record.heal_s:5.1f} s" if record.heal_s is not None
              else f"NOT HEALED: {record.not_healed}")
    notes = f"  [{'; '.join(record.notes)}]" if record.notes else ""
    return (f"{f.index:>3}/{total} {f.label:<26} {' + '.join(map(_shown, record.targets)):<22} held {held:<13} "
            f"{healed}  {acked} acked so far{notes}")


def _require_running(*workloads: JavaWorkload) -> None:
    for w in workloads:
        if not w.alive:
            raise RuntimeError(f"the Java {w.main} exited ({w.proc.returncode}):\n{w.log()[-3000:]}")


def run_suite(faults: list[Fault], role: str, work: Path, *, seed: int = 0, rate: float = 50, threads: int = 2,
              heal_deadline_s: float = 90, failover_timeout_ms: int = 3000, out=print) -> SuiteRun:
    """Start the group and the workload, carry out ``faults`` one after another, check."""
    work = Path(work)
    group = LocalGroup(work / "group", role, failover_timeout_ms)
    producer = consumer = None
    records: list[FaultRecord] = []
    try:
        group.start(TOPIC)
        consumer = start_consumer(group.namesrv, TOPIC, "chaos_consumer", work / "consumer.jsonl")
        _wait("the Java consumer started", consumer.ready, 60)
        producer = start_producer(group.namesrv, TOPIC, work / "producer.jsonl", rate=rate, threads=threads,
                                  key_prefix="chaos")
        acks = AckFollower(producer.history)
        _wait("100 sends acknowledged before the first fault", lambda: acks.count() >= 100, 90)
        _wait("the slave in the in-sync set before the first fault", lambda: group.unhealthy() is None, 60)
        run_start = min(acks.ack_times)
        out(f"{role}, seed {seed}, {len(faults)} faults; histories and logs in {work}")
        for fault in faults:
            record = FaultRecord(fault)
            records.append(record)
            carry_out(group, fault, record)
            heal(group, record, heal_deadline_s)
            _require_running(producer, consumer)
            if record.heal_s is not None:
                writes_resumed(acks, record, 20, 30)
            out(progress_line(record, len(faults), acks.count()))
        run_end = time.time()
        code = producer.stop()
        if code not in (0, 143):
            raise RuntimeError(f"the producer did not stop cleanly ({code}):\n{producer.log()[-3000:]}")
        drained = drain(producer, consumer)
        consumer.stop()
    finally:
        for w in (producer, consumer):
            if w is not None:
                w.stop(10)
        group.stop()

    history = load(producer.history, consumer.history)
    overall = check(history, fault=f"whole run ({role})")
    span_list = spans([(r.fault.label, r.injected_at, r.heal_s) for r in records], run_start, run_end)
    return SuiteRun(role, seed, work, records, overall, attribute(overall, history, span_list), drained)


def _wait(what: str, check_, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check_():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached in {timeout:.0f} s")
        time.sleep(POLL)  # polling other processes' state


def summarize(run: SuiteRun) -> str:
    """The table, the whole run's report, each fault's anomalies, the faults that did not heal."""
    lines = [table(run.results), "", report(run.overall)]
    if not run.drained:
        lines.append("  the consumer stopped reading before every acknowledged message was read")
    for r in run.results:
        for p in r.problems():
            lines.append(f"  during {r.fault} (from {datetime.datetime.fromtimestamp(r.start or 0):%H:%M:%S}): {p}")
    for rec in run.unhealed:
        lines.append(f"  fault {rec.fault.index} ({rec.fault.label}) did not heal: {rec.not_healed}")
    return "\n".join(lines)


def save(run: SuiteRun, path: Path, rate: float, failover_timeout_ms: int, heal_deadline_s: float) -> dict:
    return write_results(path, run.results, {
        "layer": "local processes (name server, controller, two brokers in controller mode)",
        "role": run.role, "seed": run.seed, "faults": len(run.records), "rate": rate,
        "failover_timeout_ms": failover_timeout_ms, "heal_deadline_s": heal_deadline_s,
        "work_dir": str(run.work), "drained": run.drained, "ok": run.ok,
        "not_healed": [r.summary() for r in run.unhealed],
        "whole_run": run.overall.summary(),
        "fault_log": [r.summary() for r in run.records],
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.chaos.local_suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--role", choices=("SYNC_MASTER", "ASYNC_MASTER"), default="SYNC_MASTER")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(KINDS)}")
    ap.add_argument("--results", default=None, help="the JSON results file (default: none)")
    ap.add_argument("--work", default=None, help="histories, logs, data (default .cache/chaos/<role>-<time>)")
    ap.add_argument("--rate", type=float, default=50, help="sends a second")
    ap.add_argument("--heal-deadline", type=float, default=90, help="s a fault's group has to heal")
    ap.add_argument("--failover-timeout", type=int, default=3000, help="the controller's, ms")
    args = ap.parse_args(argv)

    faults = plan(args.faults, args.seed, args.kinds.split(","))
    work = Path(args.work or REPO / ".cache" / "chaos" / f"{args.role.lower()}-{time.strftime('%Y%m%d-%H%M%S')}")
    from testkit.java_client import ensure_compat_classes
    ensure_compat_classes()
    run = run_suite(faults, args.role, work, seed=args.seed, rate=args.rate, heal_deadline_s=args.heal_deadline,
                    failover_timeout_ms=args.failover_timeout)
    print()
    print(summarize(run))
    if args.results:
        save(run, Path(args.results), args.rate, args.failover_timeout, args.heal_deadline)
        print(f"results: {args.results}")
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
