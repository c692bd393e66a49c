"""The fault-injection suite's pieces end to end against local processes (issue 30, items 4-5):
a SYNC_MASTER group in controller mode (name server, ``ferrymq controller``, master and slave on
127.0.0.1), the official RocketMQ 4.9.7 Java producer and push consumer recording their history,
the master killed with SIGKILL mid-run, the slave promoted, the old master restarted (it rejoins as
a slave, as a pod would come back), the workload going on; at the end the consumer has read
everything and the checker finds nothing lost, no inconsistent or nonmonotonic offset, and a
write-unavailability window around the kill."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from e2e.chaos.checker import check, report, table
from e2e.chaos.history import load
from e2e.chaos.results import write_results
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from tests.compat.harness import CompatUnavailable, ensure_compat_classes
from tests.failover_support import FailoverPair, controller_state
from tests.support import missing_prerequisite, poll_until, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow]

TOPIC = "ChaosTopic"


@pytest.fixture(scope="module")
def java_workload():
    try:
        ensure_compat_classes()
    except CompatUnavailable as e:
        missing_prerequisite(f"chaos workload: Maven Central unreachable: {e.reason}")


async def create_topic(namesrv: str) -> None:
    async with AdminClient(namesrv_addr=namesrv) as admin:
        async def master_registered():
            try:
                return await admin.master_addrs("HACluster")
            except MQClientError:
                return None
        await wait_until(master_registered, 30, "the master registered")
        await admin.create_topic(TOPIC, read_queues=4, write_queues=4, cluster="HACluster")


def acks_since(history_path, since: float = 0.0) -> int:
    """SEND_OK lines of the producer's history whose attempt started after ``since`` (s)."""
    return sum(1 for s in load(history_path).sends if s.acked and s.t0 > since)


def state(p: FailoverPair) -> dict:
    return asyncio.run(controller_state(p.controller))


def test_master_killed_mid_run_nothing_acknowledged_is_lost(tmp_path, java_workload):
    from e2e.chaos.workload import start_consumer, start_producer

    p = FailoverPair(tmp_path, "SYNC_MASTER", ["syncFlushTimeout=2000"], failover_timeout=3000)
    producer = consumer = None
    try:
        p.start_namesrv()
        p.start_controller()
        p.start_master()
        p.start_slave()
        asyncio.run(create_topic(p.namesrv))

        consumer = start_consumer(p.namesrv, TOPIC, "chaos_consumer", tmp_path / "consumer.jsonl")
        poll_until("the Java consumer started", consumer.ready, 60)
        producer = start_producer(p.namesrv, TOPIC, tmp_path / "producer.jsonl", rate=50, threads=2,
                                  key_prefix="chaos")
        poll_until("150 sends acknowledged before the kill", lambda: acks_since(producer.history) >= 150, 90,
                   diagnostics=producer.log)
        before = state(p)
        assert (before["epoch"], before["masterId"]) == (1, 0)

        p.processes["master"].kill()  # SIGKILL
        killed = time.time()
        poll_until("broker 1 promoted (epoch 2)", lambda: (s := state(p))["epoch"] == 2 and s["masterId"] == 1, 30)
        promoted = time.time() - killed
        p.start_master()  # back as a pod would be; it must rejoin as a slave
        poll_until("the old master following as a slave", lambda: any(
            b["brokerId"] == 0 and b["acting"] == "SLAVE" and b["epoch"] == 2 for b in state(p).get("brokers", [])), 60)
        ready = time.time() - killed
        poll_until("150 sends acknowledged after the kill", lambda: acks_since(producer.history, killed) >= 150, 90,
                   diagnostics=lambda: producer.log()[-3000:])
        code = producer.stop()
        assert code in (0, 143), f"the producer did not stop cleanly ({code}):\n{producer.log()[-3000:]}"
        assert json.loads(producer.history.read_text().splitlines()[-1]).get("end"), "no closing line: not flushed"

        def all_read():
            r = check(load(producer.history, consumer.history))
            return r if not (r.lost or r.unseen) else None
        poll_until("the consumer reading every acknowledged message", all_read, 90,
                   diagnostics=lambda: report(check(load(producer.history, consumer.history))))
        assert consumer.stop() in (0, 143)

        result = check(load(producer.history, consumer.history), fault="kill -9 master (local)", time_to_ready=ready)
        print(report(result))
        print(table([result]))
        print(f"promoted {promoted:.1f} s after the kill, old master back as a slave after {ready:.1f} s")
        write_results(tmp_path / "chaos-results.json", [result], {"layer": "local processes"})

        assert result.valid, "\n".join(result.problems())
        assert result.acknowledged >= 300
        assert not (result.lost or result.unseen or result.inconsistent or result.nonmonotonic)
        # The outage is seen, and around the kill: from the last acknowledgement before it to the
        # first after the group acknowledged again.
        around = [w for w in result.windows if w.start <= killed <= w.end]
        assert around, f"no write-unavailability window around the kill: {result.windows}"
        assert around[0].seconds >= promoted - 1
    except BaseException:
        for w in (producer, consumer):
            if w is not None:
                print(f"--- {w.main} log (tail) ---\n{w.log()[-4000:]}")
        raise
    finally:
        for w in (producer, consumer):
            if w is not None:
                w.stop(10)
        print(p.logs())
        p.stop_all()
