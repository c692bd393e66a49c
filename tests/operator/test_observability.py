"""The Grafana dashboard and the alert rules the chart ships refer only to metrics a real
FerryMQ exports, with the labels they select on; and they are well formed."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest

from ferrymq.client.config import ClientConfig
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import create_topic, produce
from testkit.ports import free_port
from testkit.processes import StandaloneProcess

CHART = Path(__file__).resolve().parents[2] / "charts" / "ferrymq-operator"
DASHBOARD = CHART / "dashboards" / "ferrymq.json"
RULES = CHART / "templates" / "monitoring.yaml"
METRIC = re.compile(r"\bferrymq_[a-z0-9_]+")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, set[str]]:
    """sample name -> label names, scraped from a standalone that has topics, traffic and a group."""
    http = free_port()
    server = StandaloneProcess(tmp_path_factory.mktemp("metrics") / "store", ["flushDiskType=SYNC_FLUSH"],
                               http_port=http).start()
    try:
        async def traffic():
            await create_topic(server.namesrv_addr, "Watched", 2)
            sent = await produce(server.namesrv_addr, "Watched", 4)
            async with PullConsumer("dashboards", config=ClientConfig(namesrv_addr=server.namesrv_addr)) as pc:
                result = await pc.pull(sent[0].message_queue, 0, max_nums=1)
                await pc.commit(sent[0].message_queue, result.next_begin_offset)
            client = RemotingClient()  # a POP receiver: online clients by protocol, messages in flight
            try:
                popped = await client.invoke(server.broker_addr, RemotingCommand.request(RequestCode.POP_MESSAGE, {
                    "consumerGroup": "dashboards-pop", "topic": "Watched", "queueId": -1, "maxMsgNums": 2,
                    "invisibleTime": 60_000, "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG",
                    "exp": "*", "order": False}), 5)
                assert popped.code == ResponseCode.SUCCESS, popped.remark
            finally:
                await client.close()
        asyncio.run(traffic())
        text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read().decode()
    finally:
        server.stop()
    samples: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = set(re.findall(r'(\w+)="', rest)) if rest else set()
            samples.setdefault(name.split(" ")[0], set()).update(labels)
    return samples


def referenced() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return set(METRIC.findall("\n".join(exprs))) | set(METRIC.findall(RULES.read_text()))


def test_dashboard_and_rules_use_only_exported_metrics(exported):
    names = referenced()
    assert len(names) >= 15
    missing = sorted(n for n in names if n not in exported)
    assert not missing, f"not exported by a FerryMQ broker or name server: {missing}"
    for name in names:  # every broker series is selectable by cluster and broker, as the dashboard does
        if name.startswith("ferrymq_broker_"):
            assert {"cluster", "broker"} <= exported[name], (name, exported[name])
    assert "topic" in exported["ferrymq_broker_messages_in_total"]
    assert "group" in exported["ferrymq_broker_group_lag_messages"]
    assert "cluster" in exported["ferrymq_namesrv_brokers"]


def test_counters_are_read_as_totals_with_units_in_names(exported):
    names = referenced()
    counters = {n for n in names if n.endswith("_total")}
    assert {"ferrymq_broker_messages_in_total", "ferrymq_broker_sends_refused_busy_total"} <= counters
    assert not [n for n in names if n + "_total" in exported], "a counter read without its _total suffix"
    assert "ferrymq_broker_flush_latency_seconds_bucket" in names and "ferrymq_broker_store_commitlog_bytes" in names


def test_dashboard_is_well_formed():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "ferrymq-overview"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["title"] for p in panels}) == len(panels)
    for p in panels:
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", json.dumps(dashboard["panels"]))) - {"__rate_interval"}
    assert used <= variables, used - variables
