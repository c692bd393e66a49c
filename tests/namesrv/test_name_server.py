"""The name server over the wire: route JSON in the form each client version expects,
brokers advertising an address apart from the one they bind."""

from __future__ import annotations

import json

import pytest

from ferrymq.common import rocketmq_json
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration


async def route_body(namesrv: str, topic: str, version: int, **extra) -> tuple[int, bytes]:
    client = RemotingClient()
    try:
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **extra})
        req.version = version
        response = await client.invoke(namesrv, req)
        return response.code, response.body or b""
    finally:
        await client.close()


async def test_old_clients_get_fastjson_route_data_and_new_ones_standard_json(cluster):
    old_code, old = await route_body(cluster.namesrv_addr, "TBW102", 399)  # V4_9_3
    new_code, new = await route_body(cluster.namesrv_addr, "TBW102", 407)  # V4_9_7
    asked_code, asked = await route_body(cluster.namesrv_addr, "TBW102", 399, acceptStandardJsonOnly="true")
    assert old_code == new_code == asked_code == ResponseCode.SUCCESS
    assert b'"brokerAddrs":{0:"' in old
    with pytest.raises(ValueError):
        json.loads(old)  # raw number keys: what fastjson writes, not standard JSON
    assert json.loads(new)["brokerDatas"][0]["brokerAddrs"] == {"0": cluster.broker_addr}
    assert json.loads(asked) == json.loads(new)
    assert rocketmq_json.loads(old)["brokerDatas"][0]["brokerAddrs"] == {0: cluster.broker_addr}


async def test_unknown_topic_is_topic_not_exist_with_rocketmq_remark(cluster):
    code, _ = await route_body(cluster.namesrv_addr, "NoSuchTopic", 407)
    assert code == ResponseCode.TOPIC_NOT_EXIST


async def test_broker_advertises_brokerIP1_not_its_bind_address(tmp_path):
    """As in Kubernetes, where a broker advertises its stable DNS name: here ``localhost``."""
    c = InProcessCluster(tmp_path / "s", settings={"brokerIP1": "localhost", "brokerName": "advertised"})
    await c.start()
    try:
        _, body = await route_body(c.namesrv_addr, "TBW102", 407)
        addr = json.loads(body)["brokerDatas"][0]["brokerAddrs"]["0"]
        assert addr == f"localhost:{c.broker.server.port}"
        assert c.broker.config.listen_host == "127.0.0.1"
        # The advertised name really reaches the broker.
        client = RemotingClient()
        try:
            response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            assert response.code == ResponseCode.SUCCESS
        finally:
            await client.close()
    finally:
        await c.stop()
