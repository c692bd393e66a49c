"""The official 4.9.7 TransactionMQProducer against FerryMQ: commit and rollback, unknown
transactions decided by the broker's check-back (committed ones delivered once, rolled back
ones never), and an undecided transaction checked back by a restarted broker."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.consumer_support import read_all
from testkit.processes import StandaloneProcess

from testkit.java_client import run_java_client

pytestmark = pytest.mark.compat

TRANSACTIONS_MAIN = "ferrymq.compat.Transactions"
CHECKS = ["transactionCheckInterval=1000", "transactionTimeOut=1000"]


@pytest.fixture
def ferrymq_tx(tmp_path, rocketmq_jars):
    server = StandaloneProcess(tmp_path / "store", CHECKS).start()
    yield server
    server.stop()


def transactions(ns: str, topic: str, group: str, plan: dict[str, str], **opts) -> list[dict]:
    args = ["--namesrv", ns, "--topic", topic, "--group", group,
            "--plan", ",".join(f"{k}={v}" for k, v in plan.items())]
    for name, value in opts.items():
        args += ["--" + name.replace("_", "-"), str(value)]
    return run_java_client(args, 120, main=TRANSACTIONS_MAIN)


def delivered_keys(ns: str, topic: str) -> list[str]:
    return sorted(k for m in asyncio.run(read_all(ns, topic)) for k in m.keys)


def test_java_transactions_commit_rollback_and_check_back(ferrymq_tx):
    ns, topic, group = ferrymq_tx.namesrv_addr, f"FerryTx_{uuid.uuid4().hex[:8]}", f"tx_{uuid.uuid4().hex[:8]}"
    events = transactions(ns, topic, group, {"commit": "COMMIT/COMMIT", "rollback": "ROLLBACK/ROLLBACK",
                                             "later-yes": "UNKNOW/COMMIT", "later-no": "UNKNOW/ROLLBACK"},
                          until_checked="later-yes,later-no")
    sent = {e["key"]: e for e in events.of("sent")}
    assert {k: e["status"] for k, e in sent.items()} == dict.fromkeys(sent, "SEND_OK") and len(sent) == 4
    checked = [e["key"] for e in events.of("checked")]
    assert "commit" not in checked and "rollback" not in checked  # decided at once: never asked
    time.sleep(2.5)  # two more check rounds: nothing decided is delivered twice
    assert delivered_keys(ns, topic) == ["commit", "later-yes"]


def test_java_transaction_left_open_is_checked_back_after_a_broker_restart(ferrymq_tx):
    ns, topic, group = ferrymq_tx.namesrv_addr, f"FerryTx_{uuid.uuid4().hex[:8]}", f"tx_{uuid.uuid4().hex[:8]}"
    transactions(ns, topic, group, {"across-restart": "UNKNOW/UNKNOW"})  # sends, leaves it open, exits
    ferrymq_tx.stop()
    ferrymq_tx.start()
    assert delivered_keys(ns, topic) == []
    events = transactions(ns, topic, group, {"across-restart": "UNKNOW/COMMIT"}, send="none",
                          until_checked="across-restart")
    assert [e["answer"] for e in events.of("checked")][-1] == "COMMIT"
    time.sleep(2.5)
    assert delivered_keys(ns, topic) == ["across-restart"]
