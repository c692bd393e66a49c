"""Apache's 5.3.1 remoting client (``rocketmq-client``) as a peer beside 4.9.7: the same test
against ``ferrymq standalone`` and against Apache's own 5.3.1 broker.

Sync, async, oneway and batch sends; a concurrent push consumer and ``DefaultLitePullConsumer``
in subscribe and assign mode; orderly sends by sharding key (``MessageQueueSelector``) read by an
orderly push consumer; ``TransactionMQProducer`` commit, rollback and unknown resolved by
check-back; ``producer.request`` answered through ``MessageUtil.createReplyMessage`` (the
RequestCallback form: 5.3.1's blocking ``request(msg, timeout)`` gives up once the request is
stored, apache/rocketmq#9319); all signed with a plain-ACL account that holds exactly these
topics and groups; a wrong secret and a topic not granted are refused alike.
(Timers and trace: test_timers_java5_remoting.py, test_msg_trace.py.)

Both brokers run with ACL on and a transaction checked back after 3 s. ONE client JVM per peer
(``ferrymq.compat53.RemotingMatrix``) runs every scenario; the tests below assert on its events:
every message acknowledged reaches every group exactly once, with its body.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict

import pytest

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from testkit.apache import ApacheRocketMQ
from testkit.java_client import ROCKETMQ5_VERSION, JavaEvents, run_java_client
from testkit.plain_acl import admin_and_app
from testkit.processes import StandaloneProcess

pytestmark = pytest.mark.compat

MAIN = "ferrymq.compat53.RemotingMatrix"
COUNT = 10  # messages per send mode
SEND_MODES = ("sync", "async", "oneway", "batch")
SHARDS, STEPS = 4, 10  # orderly: sharding keys order-0..3, steps 0..9 each
ADMIN = Credentials("admin0001", "admin-secret")
APP = Credentials("matrix-app", "app-secret-53")
SCENARIO_TOPICS = ("send", "order", "tx", "rr")  # granted to APP
DENIED_TOPIC = "denied"  # made too, not granted
CONSUMER_GROUPS = ("push", "lite_sub", "lite_assign", "orderly", "tx_consumer", "rr_service")
FERRYMQ_CLUSTER, APACHE_CLUSTER = "DefaultCluster", "FerryCompatCluster"
BROKER_SETTINGS = {"aclEnable": "true", "transactionCheckInterval": "1000", "transactionTimeOut": "3000"}
# Apache 5.3.1 writes a decision's op record in batches, every 3 s by default: with a shorter
# transactionTimeOut it checks back what was decided at once, and stores a committed message
# again at every COMMIT answer (seen with 1 s: "commit" delivered 5 times)
APACHE_SETTINGS = {**BROKER_SETTINGS, "transactionOpBatchInterval": "100"}


def plain_acl(prefix: str, cluster: str) -> str:
    """An admin (makes the topics) and the client's account: only its topics and groups, and
    the cluster's reply topic (a responder's reply messages go there)."""
    topics = [*(f"{prefix}_{t}=PUB|SUB" for t in SCENARIO_TOPICS), f"{cluster}_REPLY_TOPIC=PUB"]
    return admin_and_app(ADMIN, APP, topics, [f"{prefix}_{g}=SUB" for g in CONSUMER_GROUPS])


async def create_topics(namesrv: str, prefix: str) -> None:
    async with AdminClient(config=ClientConfig(namesrv_addr=namesrv, credentials=ADMIN)) as admin:
        for t in (*SCENARIO_TOPICS, DENIED_TOPIC):
            await admin.create_topic(f"{prefix}_{t}", read_queues=4, write_queues=4)


class Run:
    """One peer's matrix run: its events, grouped for the tests."""

    def __init__(self, peer: str, prefix: str, events: JavaEvents):
        self.peer, self.prefix, self.events = peer, prefix, events

    def of(self, event: str, scenario: str) -> list[dict]:
        return [e for e in self.events.of(event) if e["scenario"] == scenario]

    def received(self, group: str) -> list[dict]:
        return [e for e in self.events.of("received") if e["group"] == f"{self.prefix}_{group}"]

    def acked(self, scenario: str) -> list[str]:
        return [e["key"] for e in self.of("sent", scenario) if e["sendStatus"] in ("SEND_OK", None)]

    def __repr__(self) -> str:  # shown by a failing assert
        return (f"Run({self.peer}, exit {self.events.returncode}, errors {self.events.of('error')}, "
                f"failed sends {self.events.of('send_failed')}, waits {self.events.of('waited')})")


@pytest.fixture(scope="module", params=["ferrymq", "apache-5.3.1"])
def run(request, rocketmq5_jars, tmp_path_factory) -> Run:
    """The matrix run once against the peer (started with ACL and quick check-backs)."""
    prefix = f"M53_{uuid.uuid4().hex[:8]}"
    if request.param == "ferrymq":
        work = tmp_path_factory.mktemp("ferrymq-matrix53")
        (work / "plain_acl.yml").write_text(plain_acl(prefix, FERRYMQ_CLUSTER))
        settings = [f"{k}={v}" for k, v in BROKER_SETTINGS.items()] + [f"aclFile={work / 'plain_acl.yml'}"]
        server = StandaloneProcess(work / "store", settings).start()
        try:
            events = matrix(server.namesrv_addr, prefix)
        finally:
            assert server.stop() == 0, server.log()
    else:
        with ApacheRocketMQ(broker_version=ROCKETMQ5_VERSION, broker_conf=APACHE_SETTINGS,
                            plain_acl=plain_acl(prefix, APACHE_CLUSTER),
                            cluster_name=APACHE_CLUSTER) as mq:
            events = matrix(mq.namesrv_addr, prefix)
    return Run(request.param, prefix, events)


def matrix(namesrv: str, prefix: str) -> JavaEvents:
    asyncio.run(create_topics(namesrv, prefix))
    return run_java_client(["--namesrv", namesrv, "--prefix", prefix, "--access-key", APP.access_key,
                            "--secret-key", APP.secret_key, "--count", COUNT, "--timeout-ms", 60000],
                           timeout=300, check=False, main=MAIN, version=ROCKETMQ5_VERSION)


def exactly_once(run: Run, group: str, keys: list[str]) -> dict[str, dict]:
    """Every key received once by the group, with its body; the events by key."""
    got = run.received(group)
    twice = [k for k, n in Counter(e["key"] for e in got).items() if n > 1]
    assert not twice, f"{group}: delivered more than once: {twice} ({run})"
    assert sorted(e["key"] for e in got) == sorted(keys), f"{group}: {run}"
    assert all(e["body"] == f"body of {e['key']}" for e in got)
    return {e["key"]: e for e in got}


def test_the_client_ran_to_its_end(run):
    assert run.events.returncode == 0 and run.events.done == {"event": "done", "scenario": "all", "ok": True}, run


def test_sync_async_oneway_and_batch_sends_are_acknowledged(run):
    by_mode = defaultdict(list)
    for e in run.of("sent", "send"):
        by_mode[e["mode"]].append(e)
    assert sorted(by_mode) == sorted(SEND_MODES), run
    for mode, sent in by_mode.items():
        assert sorted(e["key"] for e in sent) == sorted(f"{mode}-{i}" for i in range(COUNT))
        if mode != "oneway":  # oneway is never answered
            assert {e["sendStatus"] for e in sent} == {"SEND_OK"}
    assert len({e["queueId"] for e in by_mode["batch"]}) == 1  # one batch, one queue
    assert not run.of("send_failed", "send"), run


@pytest.mark.parametrize("group", ["push", "lite_sub", "lite_assign"])
def test_every_send_reaches_each_consumer_exactly_once(run, group):
    """A concurrent push consumer, and lite pull consumers by subscription and by assigned queues."""
    exactly_once(run, group, [f"{mode}-{i}" for mode in SEND_MODES for i in range(COUNT)])


def test_orderly_consumer_keeps_each_sharding_keys_order(run):
    sent = {e["key"]: e for e in run.of("sent", "order")}
    assert len(sent) == SHARDS * STEPS and {e["sendStatus"] for e in sent.values()} == {"SEND_OK"}, run
    got = exactly_once(run, "orderly", list(sent))
    for shard in range(SHARDS):
        keys = [f"order-{shard}:{step}" for step in range(STEPS)]
        assert len({sent[k]["queueId"] for k in keys}) == 1, "the selector spread one sharding key"
        assert all(got[k]["queueId"] == sent[k]["queueId"] for k in keys)
        seen = [e["key"] for e in run.received("orderly") if e["key"].startswith(f"order-{shard}:")]
        assert seen == keys, f"order-{shard} out of order: {seen}"


def test_transactions_commit_rollback_and_check_back(run):
    sent = {e["key"]: e["localState"] for e in run.of("sent", "tx") if e["sendStatus"] == "SEND_OK"}
    assert sent == {"commit": "COMMIT_MESSAGE", "rollback": "ROLLBACK_MESSAGE",
                    "later-yes": "UNKNOW", "later-no": "UNKNOW"}, run
    checked = {(e["key"], e["answer"]) for e in run.of("checked", "tx")}
    assert {("later-yes", "COMMIT"), ("later-no", "ROLLBACK")} <= checked, run
    assert not {k for k, _ in checked} & {"commit", "rollback"}, "decided at once, yet checked back"
    # the consumer stays up through every later scenario: a rolled back message never comes
    exactly_once(run, "tx_consumer", ["commit", "later-yes"])


def test_request_is_answered_by_a_reply_message(run):
    replies = [(e["request"], e["reply"]) for e in run.of("reply", "rr")]
    assert replies == [(f"question-{i}", f"reply to question-{i}") for i in range(5)], run
    questions = [e for e in run.received("rr_service") if e["key"].startswith("question-")]  # not the pings
    assert sorted(e["key"] for e in questions) == [f"question-{i}" for i in range(5)]


@pytest.mark.parametrize("key, reason", [
    ("refused-secret", f"Check signature failed for accessKey={APP.access_key}"),
    ("refused-topic", "No default permission for topic:{prefix}_denied"),
])
def test_a_wrong_secret_or_an_ungranted_topic_is_refused_and_nothing_stored(run, key, reason):
    (refused,) = [e for e in run.of("send_failed", "acl") if e["key"] == key]
    assert (refused["class"], refused["cause"], refused["code"]) == (
        "org.apache.rocketmq.client.exception.MQClientException",
        "org.apache.rocketmq.client.exception.MQBrokerException", 1), refused
    assert f"AclException: {reason.format(prefix=run.prefix)}" in refused["causeMessage"], refused
    assert not run.of("sent", "acl")
    assert not [e for e in run.events.of("received") if e["key"] == key]
