"""What a master answers its slaves' SlaveSynchronize, as Apache RocketMQ 5 does: the consumer
offset table with a data version that moves on when an offset changes (GET_ALL_CONSUMER_OFFSET,
43; a 5.x slave fails without it), and the message request mode table
(GET_ALL_MESSAGE_REQUEST_MODE, 402). A FerryMQ slave takes the master's offsets with their version."""

from __future__ import annotations

import pytest

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common import rocketmq_json
from ferrymq.common.consumer_protocol import ConsumerOffsetSerializeWrapper, MessageRequestModeSerializeWrapper
from ferrymq.common.protocol import DataVersion, MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import create_topic


async def _ask(addr: str, code: int) -> bytes:
    client = RemotingClient()
    try:
        answer = await client.invoke(addr, RemotingCommand.request(code), 5)
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer.body or b""


@pytest.mark.integration
async def test_the_offset_table_answer_carries_a_data_version_that_moves_when_offsets_change(cluster):
    await create_topic(cluster.namesrv_addr, "SyncedOffsets")
    mq = MessageQueue("SyncedOffsets", "broker-a", 1)
    async with PullConsumer("synced-group", namesrv_addr=cluster.namesrv_addr) as consumer:
        await consumer.commit(mq, 5)
        first = rocketmq_json.loads(await _ask(cluster.broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert first["offsetTable"]["SyncedOffsets@synced-group"] == {1: 5}
        assert set(first["dataVersion"]) == {"counter", "stateVersion", "timestamp"}

        await consumer.commit(mq, 5)  # the same offset again: nothing changed
        again = rocketmq_json.loads(await _ask(cluster.broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert again["dataVersion"] == first["dataVersion"]

        await consumer.commit(mq, 9)
        moved = rocketmq_json.loads(await _ask(cluster.broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
    assert moved["offsetTable"]["SyncedOffsets@synced-group"] == {1: 9}
    assert moved["dataVersion"]["counter"] > first["dataVersion"]["counter"]


@pytest.mark.integration
async def test_the_message_request_mode_answer_is_apaches_empty_table(cluster):
    body = await _ask(cluster.broker_addr, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
    assert rocketmq_json.loads(body) == {"messageRequestModeMap": {}}
    assert MessageRequestModeSerializeWrapper.from_json(body).message_request_mode_map == {}


async def test_a_slave_takes_the_masters_offsets_and_data_version_and_keeps_them_on_disk(tmp_path):
    master = ConsumerOffsetManager(tmp_path / "master")
    master.commit("g", "T", 0, 12)
    master.commit("g", "T", 3, 7)
    slave = ConsumerOffsetManager(tmp_path / "slave")
    slave.commit("other", "U", 0, 4)  # the slave's own entries stay (a merge, as RocketMQ's)

    slave.adopt(ConsumerOffsetSerializeWrapper.from_json(master.render()))
    assert slave.query("g", "T", 3) == 7 and slave.query("other", "U", 0) == 4
    assert slave.data_version.same(master.data_version)
    master.commit("g", "T", 0, 13)
    assert not slave.data_version.same(master.data_version), "a copy, not the master's object"

    await slave.persist()
    reloaded = ConsumerOffsetManager(tmp_path / "slave")
    reloaded.load()
    assert reloaded.queues_of("g", "T") == {0: 12, 3: 7}
    assert reloaded.data_version.to_dict() == slave.data_version.to_dict()


def test_a_4x_masters_offsets_without_a_data_version_leave_the_slaves(tmp_path):
    slave = ConsumerOffsetManager(tmp_path)
    own = DataVersion.from_dict(slave.data_version.to_dict())
    slave.adopt(ConsumerOffsetSerializeWrapper.from_json(b'{"offsetTable":{"T@g":{0:12}}}'))
    assert slave.query("g", "T", 0) == 12
    assert slave.data_version.same(own)
