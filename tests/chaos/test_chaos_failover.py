"""The fault-injection suite's pieces end to end against local processes (issue 30, items 4-5):
a SYNC_MASTER group in controller mode (name server, ``ferrymq controller``, master and slave on
127.0.0.1), the official RocketMQ 4.9.7 Java producer and push consumer recording their history,
a broker killed with SIGKILL mid-run and restarted (as a pod comes back), the workload going on;
at the end the consumer has read everything and the checker finds nothing lost, no inconsistent
or nonmonotonic offset, and a write-unavailability window around the kill."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from e2e.chaos.checker import Result, check, report, table
from e2e.chaos.group import create_topic
from e2e.chaos.history import load
from e2e.chaos.results import write_results
from e2e.chaos.workload import drain
from testkit.java_client import CompatUnavailable, ensure_compat_classes
from testkit.failover import FailoverPair, controller_state
from testkit.wait import poll_until
from tests.support import missing_prerequisite

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow, pytest.mark.chaos]

TOPIC = "ChaosTopic"


@pytest.fixture(scope="module")
def java_workload():
    try:
        ensure_compat_classes()
    except CompatUnavailable as e:
        missing_prerequisite(f"chaos workload: Maven Central unreachable: {e.reason}")


CLIENT_PULL_TIMEOUT_S = 30  # the 4.9.7 Java client's consumerTimeoutMillisWhenSuspend


def acks_since(history_path, since: float = 0.0) -> int:
    """SEND_OK lines of the producer's history whose attempt started after ``since`` (s)."""
    return sum(1 for s in load(history_path).sends if s.acked and s.t0 > since)


class Run:
    """One run: the group, the Java consumer and producer, and the end (drain, check, report)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.p = FailoverPair(tmp, "SYNC_MASTER", ["syncFlushTimeout=2000"], failover_timeout=3000)
        self.producer = self.consumer = None

    def start(self) -> "Run":
        from e2e.chaos.workload import start_consumer, start_producer
        p = self.p
        p.start_namesrv()
        p.start_controller()
        p.start_master()
        p.start_slave()
        asyncio.run(create_topic(p.namesrv, TOPIC))
        self.consumer = start_consumer(p.namesrv, TOPIC, "chaos_consumer", self.tmp / "consumer.jsonl")
        poll_until("the Java consumer started", self.consumer.ready, 60)
        self.producer = start_producer(p.namesrv, TOPIC, self.tmp / "producer.jsonl", rate=50, threads=2,
                                       key_prefix="chaos")
        return self

    def state(self) -> dict:
        return asyncio.run(controller_state(self.p.controller))

    def acting(self, broker_id: int, role: str, epoch: int) -> bool:
        return any(b["brokerId"] == broker_id and b["acting"] == role and b["epoch"] == epoch
                   for b in self.state().get("brokers", []))

    def wait_acks(self, count: int, since: float, what: str) -> None:
        poll_until(what, lambda: acks_since(self.producer.history, since) >= count, 90,
                   diagnostics=lambda: self.producer.log()[-3000:])

    def finish(self, fault: str, ready: float) -> Result:
        """Stop the producer (SIGTERM), let the consumer read everything acknowledged, check."""
        producer, consumer = self.producer, self.consumer
        code = producer.stop()
        assert code in (0, 143), f"the producer did not stop cleanly ({code}):\n{producer.log()[-3000:]}"
        assert json.loads(producer.history.read_text().splitlines()[-1]).get("end"), "no closing line: not flushed"

        # The official 4.9.7 consumer hears that a killed broker held its long-polling pulls only
        # when they time out (consumerTimeoutMillisWhenSuspend, 30 s; its client does not fail
        # requests on a closed connection): it reads from the new master about 30 s after the
        # kill, so the drain waits longer than that for news. The check says what is missing.
        started = time.monotonic()
        drained = drain(producer, consumer, timeout=120, quiet=CLIENT_PULL_TIMEOUT_S + 15)
        print(f"consumer {'caught up' if drained else 'still short'} {time.monotonic() - started:.1f} s into the drain")
        consumer_code = consumer.stop()
        assert consumer_code in (0, 143), f"the consumer did not stop cleanly ({consumer_code})"
        result = check(load(producer.history, consumer.history), fault=fault, time_to_ready=ready)
        print(report(result))
        print(table([result]))
        write_results(self.tmp / "chaos-results.json", [result], {"layer": "local processes"})
        assert result.skipped_lines == 0, "a history line was cut short after a clean stop"
        return result

    def close(self, failed: bool) -> None:
        for w in (self.producer, self.consumer):
            if w is not None:
                if failed:
                    print(f"--- {w.main} log (tail) ---\n{w.log()[-4000:]}")
                w.stop(10)
        print(self.p.logs())
        self.p.stop_all()


@pytest.fixture
def run(tmp_path, java_workload, request):
    r = Run(tmp_path)
    yield r
    r.close(getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed)


def test_master_killed_mid_run_nothing_acknowledged_is_lost(run):
    """kill -9 of the master: the in-sync slave is promoted, the old master comes back as its
    slave; the window without acknowledgement spans the kill and lasts about the failover."""
    run.start()
    run.wait_acks(150, 0, "150 sends acknowledged before the kill")
    before = run.state()
    assert (before["epoch"], before["masterId"]) == (1, 0)

    run.p.processes["master"].kill()  # SIGKILL
    killed = time.time()
    poll_until("broker 1 promoted (epoch 2)", lambda: (s := run.state())["epoch"] == 2 and s["masterId"] == 1, 30)
    promoted = time.time() - killed
    run.p.start_master()
    poll_until("the old master following as a slave", lambda: run.acting(0, "SLAVE", 2), 60)
    ready = time.time() - killed
    run.wait_acks(150, killed, "150 sends acknowledged after the kill")
    result = run.finish("kill -9 master (local)", ready)
    print(f"promoted {promoted:.1f} s after the kill, old master back as a slave after {ready:.1f} s")

    assert result.valid, "\n".join(result.problems())
    assert result.acknowledged >= 300
    assert not (result.lost or result.unseen or result.inconsistent or result.nonmonotonic)
    # From the last acknowledgement before the kill to the first after the group acknowledged again.
    around = [w for w in result.windows if w.start <= killed <= w.end]
    assert around, f"no write-unavailability window around the kill: {result.windows}"
    assert around[0].seconds >= promoted - 1


def test_slave_killed_then_master_the_stale_slave_is_not_promoted(run):
    """kill -9 of the slave: the master drops it from the in-sync set and acknowledges alone;
    then kill -9 of the master and the slave back: it is not in the set, so it is not promoted
    (it lacks what was acknowledged alone); writes resume when the master is back, nothing lost."""
    run.start()
    run.wait_acks(100, 0, "100 sends acknowledged with the slave in sync")
    run.p.processes["slave"].kill()
    slave_killed = time.time()
    run.wait_acks(100, slave_killed, "100 sends acknowledged by the master alone")

    run.p.processes["master"].kill()
    killed = time.time()
    run.p.start_slave()
    poll_until("the restarted slave heard by the controller", lambda: any(
        b["brokerId"] == 1 and b["silentMs"] < 1000 and b["maxOffset"] < run.state()["mustReach"]
        for b in run.state().get("brokers", [])), 30)
    stale = run.state()
    # Three failover timeouts with the master silent and the stale slave alive: no election.
    deadline = time.monotonic() + 3 * run.p.failover_timeout / 1000
    while time.monotonic() < deadline:
        assert run.state()["epoch"] == 1, f"a slave lacking acknowledged messages was promoted: {run.state()}"
        time.sleep(0.2)  # pacing the polls of a state that must not change
    run.p.start_master()
    poll_until("the slave back in sync", lambda: 1 in run.state().get("inSync", []), 60)
    ready = time.time() - killed
    run.wait_acks(100, killed, "100 sends acknowledged after the master came back")
    result = run.finish("kill -9 slave, then master (local)", ready)
    print(f"controller while the master was down: {stale}")

    assert result.valid, "\n".join(result.problems())
    assert not (result.lost or result.unseen or result.inconsistent or result.nonmonotonic)
    around = [w for w in result.windows if w.start <= killed <= w.end]
    assert around and around[0].seconds >= 3 * run.p.failover_timeout / 1000
