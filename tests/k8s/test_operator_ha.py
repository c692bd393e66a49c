"""The operator in two replicas on a real API server, with the chart's RBAC and leader election
settings (15/10/2 s): only the Lease holder acts; a standby runs no handler; the leader killed
with SIGKILL, the standby reconciles what changed meanwhile within the lease duration plus a
margin; a leader stopped cleanly hands over at once (it releases the Lease). "Acting" is read
from each process's log: kopf logs every handler and timer it runs."""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime

from tests.k8s.conftest import LEASE, RELEASE_NS, OperatorProcess
from tests.k8s.test_operator import broker_cr, condition, topic_cr, wait_status
from testkit.wait import poll_until

LEASE_DURATION = 15  # the chart's leaderElection.leaseDurationSeconds
MARGIN = 25  # kopf's start (its watchers list every resource) and one reconcile, on a loaded 2-core machine

_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
_ACTS = re.compile(r"(Handler|Timer) '[a-z-]+' (succeeded|failed)")


def stamped(text: str, pattern: str | re.Pattern) -> list[datetime]:
    """Timestamps of the log lines matching ``pattern``."""
    out = []
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m and re.search(pattern, line):
            out.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return out


def acts(op: OperatorProcess) -> list[datetime]:
    return stamped(op.log_text(), _ACTS)


def leads_at(op: OperatorProcess) -> datetime:
    (at,) = stamped(op.log_text(), f"leader election: {re.escape(op.identity)} leads")
    return at


def holder(cp) -> str:
    return (cp.get("lease", LEASE, RELEASE_NS) or {}).get("spec", {}).get("holderIdentity") or ""


def ready(o: dict) -> bool:
    return ((condition(o, "Ready") or {}).get("status") == "True"
            and o["status"].get("observedGeneration") == o["metadata"]["generation"])


def test_the_standby_takes_over_from_a_killed_leader_and_never_both_act(control_plane, operator_process, ferry_cluster,
                                                                          namespace):
    cp, ns = control_plane, namespace
    a = operator_process.current
    assert holder(cp) == a.identity
    b = OperatorProcess(cp, ferry_cluster, operator_process.workdir, "operator-b")
    successor = None
    try:
        b.wait_started("standby")
        # While a leads, b does nothing: a Broker and a Topic are reconciled by a alone.
        cp.apply([broker_cr(), topic_cr("before-kill")], ns)
        wait_status(cp, "topic", "before-kill", ns, ready, "Ready (by the leader)")
        wait_status(cp, "broker", "demo", ns, lambda o: o["status"].get("observedGeneration") == 1, "observed")
        assert holder(cp) == a.identity and acts(a)
        assert b.process.poll() is None and not acts(b), f"the standby acted:\n{b.log_text()[-3000:]}"
        assert f"[{ns}/" not in b.log_text()

        # The leader dies without a word (no release): b takes the Lease once it lapses.
        a.stop(signal.SIGKILL)
        killed = time.monotonic()
        cp.apply(topic_cr("after-kill"), ns)
        cp.kubectl("patch", "broker", "demo", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":3}}')
        wait_status(cp, "topic", "after-kill", ns, ready, "Ready (by the standby)", LEASE_DURATION + MARGIN)
        wait_status(cp, "broker", "demo", ns, lambda o: o["status"].get("observedGeneration") == 2
                    and o["status"].get("replicas") == 3, "scaled (by the standby)", LEASE_DURATION + MARGIN)
        took = time.monotonic() - killed
        assert holder(cp) == b.identity
        # b acted only once it led, and not before the killed leader's Lease could have lapsed
        assert acts(b) and min(acts(b)) >= leads_at(b)
        assert took >= LEASE_DURATION - 3, f"the standby led {took:.1f} s after the kill: before the Lease lapsed?"
        assert (leads_at(b) - max(acts(a))).total_seconds() > 0

        # A clean stop hands over at once: c waits as a standby, b is stopped (SIGTERM), c leads
        # well before a lease duration, since b released the Lease.
        successor = OperatorProcess(cp, ferry_cluster, operator_process.workdir, "operator-c")
        successor.wait_started("standby")
        assert not acts(successor)
        stopping = time.monotonic()
        b.stop(signal.SIGTERM)
        assert b.process.returncode == 0, b.log_text()[-3000:]
        assert "released" in b.log_text()
        successor.wait_started("leads", timeout=LEASE_DURATION)
        assert time.monotonic() - stopping < LEASE_DURATION - 3, "the Lease was not released: c waited it out"
        operator_process.current, successor = successor, None  # the session's operator from now on
        cp.apply(topic_cr("after-handover"), ns)
        wait_status(cp, "topic", "after-handover", ns, ready, "Ready (by the new leader)", MARGIN)
        c = operator_process.current
        assert holder(cp) == c.identity
        assert max(acts(b)) <= leads_at(c) <= min(acts(c)), "b acted after c began leading"
    finally:
        b.stop(signal.SIGKILL)
        if successor is not None:
            successor.stop(signal.SIGKILL)
        if operator_process.current is a:
            # the session needs a leader: a is gone, so start one (it leads once the Lease lapses)
            operator_process.current = OperatorProcess(cp, ferry_cluster, operator_process.workdir, "operator-d")
            operator_process.current.wait_started("leads", timeout=LEASE_DURATION + 30)


def test_a_leader_cut_off_from_the_api_server_stops_acting_at_once(control_plane, operator_process, ferry_cluster,
                                                                     namespace):
    """Frozen (SIGSTOP) past the lease duration, the leader has been replaced when it wakes: its
    first renewal fails, and it exits instead of acting on (a pod restarts it as a standby)."""
    cp = control_plane
    leader = operator_process.current
    standby = OperatorProcess(cp, ferry_cluster, operator_process.workdir, "operator-e")
    try:
        standby.wait_started("standby")
        # a Broker whose resync timer (every second here) fires as soon as the leader wakes
        cp.apply(broker_cr(), namespace)
        wait_status(cp, "broker", "demo", namespace, lambda o: o["status"].get("observedGeneration") == 1, "observed")
        leader.process.send_signal(signal.SIGSTOP)
        standby.wait_started("leads", timeout=LEASE_DURATION + 15)
        operator_process.current = standby
        leader.process.send_signal(signal.SIGCONT)
        poll_until("the old leader to exit", lambda: leader.process.poll() is not None, 30,
                   diagnostics=lambda: leader.log_text()[-3000:])
        assert leader.process.returncode == 3, leader.log_text()[-3000:]
        assert f"{leader.identity} lost the Lease" in leader.log_text()
        assert holder(cp) == standby.identity
        # woken after the standby took over, it ran no handler before exiting
        assert not [t for t in acts(leader) if t >= leads_at(standby)], leader.log_text()[-3000:]
        cp.kubectl("patch", "broker", "demo", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":1}}')
        wait_status(cp, "broker", "demo", namespace, lambda o: o["status"].get("observedGeneration") == 2,
                    "observed by the new leader", MARGIN)
    finally:
        if leader.process.poll() is None:
            leader.process.send_signal(signal.SIGCONT)
        if operator_process.current is leader:
            standby.stop(signal.SIGKILL)
            leader.stop(signal.SIGKILL)
            operator_process.current = OperatorProcess(cp, ferry_cluster, operator_process.workdir, "operator-f")
            operator_process.current.wait_started("leads", timeout=LEASE_DURATION + 30)
