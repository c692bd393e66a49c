"""The fault-injection workload's Java programs (tests/compat/java/.../ferrymq/chaos) against
``ferrymq standalone`` with no fault: the producer stops on SIGTERM with its history whole, the
consumer (history on stdout, as in a pod) stops once idle, and the checker finds every
acknowledged message read, in order, with no window of unavailability."""

from __future__ import annotations

import json
import uuid

import pytest

from e2e.chaos.checker import check, report
from e2e.chaos.history import load, parse_lines
from e2e.chaos.workload import CONSUMER_MAIN, start_producer
from testkit.java_client import CompatUnavailable, ensure_compat_classes, run_java_client
from testkit.wait import poll_until
from tests.support import missing_prerequisite

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_producer_and_consumer_histories_check_clean(standalone_process, tmp_path):
    try:
        ensure_compat_classes()
    except CompatUnavailable as e:
        missing_prerequisite(f"chaos workload: Maven Central unreachable: {e.reason}")
    server = standalone_process()
    topic = f"ChaosSmoke{uuid.uuid4().hex[:8]}"

    producer = start_producer(server.namesrv_addr, topic, tmp_path / "producer.jsonl", rate=100, threads=2,
                              key_prefix="smoke")
    try:
        poll_until("200 sends acknowledged", lambda: sum(s.acked for s in load(producer.history).sends) >= 200, 60,
                   diagnostics=producer.log)
    finally:
        code = producer.stop()
    assert code in (0, 143), producer.log()
    lines = producer.history.read_text().splitlines()
    assert json.loads(lines[0])["role"] == "producer" and "end" in json.loads(lines[-1])
    assert producer.events("done"), producer.log()

    events = run_java_client(["--namesrv", server.namesrv_addr, "--topic", topic, "--group", f"{topic}_c",
                              "--out", "-", "--idle-ms", "3000", "--max-ms", "60000"], 90, main=CONSUMER_MAIN)
    consumed = parse_lines((json.dumps(e) for e in events), "consumer")
    history = load(producer.history).extend(consumed)
    result = check(history, fault="none")
    print(report(result))
    assert result.valid, "\n".join(result.problems())
    assert result.acknowledged >= 200 and result.failed == 0 and result.keys_read == result.acknowledged
    assert result.windows == [] and result.duplicates == {} and result.skipped_lines == 0
    assert {r.session for r in history.reads} and all(r.consumer for r in history.reads)
