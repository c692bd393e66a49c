"""The failover controller: its decisions as pure functions (who is elected, how much of a
returning broker's CommitLog the group still shares) and the controller itself on a real
socket, heartbeated by hand: the first master, a slave told whom to follow, an election once
the master is silent, the promotion recorded, and the epochs kept across a controller restart."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferrymq.common.controller_protocol import (
    CONTROLLER_ALTER_IN_SYNC,
    CONTROLLER_GET_STATE,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_PROMOTED,
)
from ferrymq.controller.controller import Controller, ControllerConfig
from ferrymq.controller.state import BrokerSeen, EpochRecord, Group, alter_in_sync, elect, truncation_point
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.wait import wait_until
from tests.store.small_fs import fill_completely, small_filesystem_or_skip

HISTORY = [EpochRecord(1, 0, 0), EpochRecord(2, 5000, 1), EpochRecord(3, 9000, 0)]


@pytest.mark.parametrize("local_epoch, max_offset, expected", [
    (3, 12000, -1),  # the current epoch: nothing to cut
    (2, 9500, 9000),  # master of epoch 2 wrote past where epoch 3 began
    (2, 8000, -1),  # a slave of epoch 2 short of epoch 3's start: all shared
    (1, 7000, 5000),  # epoch 1's master, back after two failovers
    (0, 100, 0),  # a broker new to the group with data of its own
    (0, 0, -1),
])
def test_truncation_point_is_the_start_of_the_first_epoch_after_the_brokers_own(local_epoch, max_offset, expected):
    assert truncation_point(HISTORY, local_epoch, max_offset) == expected


def seen(broker_id: int, epoch: int, max_offset: int, at: float, acting: str = "SLAVE") -> BrokerSeen:
    return BrokerSeen(broker_id, f"10.0.0.{broker_id}:10911", f"10.0.0.{broker_id}:10912", epoch, max_offset, 0,
                      acting, at)


def test_election_takes_the_in_sync_slave_with_most_data_heard_after_the_master_fell_silent():
    group = Group("c", "b", [EpochRecord(4, 1000, 0)], must_reach=2000, in_sync=frozenset({1, 2, 3, 4, 5}))
    group.brokers = {0: seen(0, 4, 2500, 10.0, "MASTER"),
                     1: seen(1, 4, 2100, 13.0),  # in sync
                     2: seen(2, 4, 2300, 13.5),  # in sync, more data: chosen
                     3: seen(3, 4, 1900, 13.9),  # short of what the master acknowledged
                     4: seen(4, 3, 2600, 13.9),  # still on an older epoch
                     5: seen(5, 4, 2900, 9.0),  # not heard from since the master fell silent
                     6: seen(6, 4, 3000, 13.9)}  # the most data, but not in the in-sync set
    assert elect(group, 14.0, 3.0, 10.0, unclean=False).broker_id == 2
    del group.brokers[1], group.brokers[2]
    assert elect(group, 14.0, 3.0, 10.0, unclean=False) is None
    assert elect(group, 14.0, 3.0, 10.0, unclean=True).broker_id == 6  # enableElectUncleanMaster: the best left


def test_only_the_current_master_changes_the_in_sync_set_and_only_from_the_version_it_saw():
    group = Group("c", "b", [EpochRecord(4, 1000, 0)], in_sync=frozenset({1}), in_sync_epoch=7)
    assert "not the master" in alter_in_sync(group, 1, 4, 7, frozenset())  # a slave cannot
    assert "not the master" in alter_in_sync(group, 0, 3, 7, frozenset())  # nor a master of an older epoch
    assert "version 7" in alter_in_sync(group, 0, 4, 6, frozenset())  # a stale view is refused
    assert "slaves only" in alter_in_sync(group, 0, 4, 7, frozenset({0}))
    assert (group.in_sync, group.in_sync_epoch) == (frozenset({1}), 7)
    assert alter_in_sync(group, 0, 4, 7, frozenset({1, 2})) is None
    assert (group.in_sync, group.in_sync_epoch) == (frozenset({1, 2}), 8)
    group.new_term(EpochRecord(5, 3000, 2))  # a new master starts alone
    assert (group.in_sync, group.in_sync_epoch, group.must_reach) == (frozenset(), 9, 3000)
    assert "not the master" in alter_in_sync(group, 0, 4, 9, frozenset())


async def alter(client: RemotingClient, addr: str, broker_id: int, epoch: int, in_sync_epoch: int,
                members: str) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(CONTROLLER_ALTER_IN_SYNC, {
        "brokerName": "grp", "brokerId": broker_id, "epoch": epoch, "inSyncEpoch": in_sync_epoch,
        "inSync": members}), 5)


async def heartbeat(client: RemotingClient, addr: str, broker_id: int, epoch: int, max_offset: int, acting: str,
                    confirmed: int = 0) -> dict:
    answer = await client.invoke(addr, RemotingCommand.request(CONTROLLER_HEARTBEAT, {
        "clusterName": "C", "brokerName": "grp", "brokerId": broker_id, "brokerAddr": f"127.0.0.1:{20000 + broker_id}",
        "haServerAddr": f"127.0.0.1:{20001 + broker_id}", "epoch": epoch, "maxOffset": max_offset,
        "confirmedOffset": confirmed, "acting": acting}), 5)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer.ext_fields


async def kept_in_sync(config: ControllerConfig, client: RemotingClient) -> tuple[list[int], int]:
    """The in-sync set and its version a controller started again on ``config``'s state shows."""
    restarted = Controller(config)
    await restarted.start()
    try:
        group = await group_state(client, restarted.address)
    finally:
        await restarted.stop()
    return group["inSync"], group["inSyncEpoch"]


async def group_state(client: RemotingClient, addr: str) -> dict:
    """Broker group "grp" as the controller's CONTROLLER_GET_STATE shows it."""
    state = await client.invoke(addr, RemotingCommand.request(CONTROLLER_GET_STATE), 5)
    return json.loads(state.body)["groups"]["grp"]


def test_controller_elects_records_and_keeps_epochs_across_a_restart(tmp_path):
    async def scenario():
        config = ControllerConfig(listen_port=0, data_dir=str(tmp_path), failover_timeout=1000)
        controller = Controller(config)
        await controller.start()
        client = RemotingClient()
        try:
            addr = controller.address
            # Before any master exists a slave waits; broker 0 becomes master of epoch 1.
            assert (await heartbeat(client, addr, 1, 0, 0, "NONE"))["role"] == "WAIT"
            first = await heartbeat(client, addr, 0, 0, 0, "NONE")
            assert (first["role"], first["epoch"]) == ("MASTER", "1")
            await heartbeat(client, addr, 0, 1, 800, "MASTER", confirmed=700)
            follow = await heartbeat(client, addr, 1, 0, 0, "NONE")
            assert (follow["role"], follow["masterAddr"], follow["masterHaAddr"], follow["masterId"]) == \
                ("SLAVE", "127.0.0.1:20000", "127.0.0.1:20001", "0")
            # The master takes the caught-up slave into its in-sync set (else nobody could be elected).
            master_view = await heartbeat(client, addr, 0, 1, 800, "MASTER", confirmed=700)
            assert (master_view["inSync"], master_view["inSyncEpoch"]) == ("", "1")
            assert (await alter(client, addr, 0, 1, 0, "1")).code != ResponseCode.SUCCESS  # stale version
            grown = await alter(client, addr, 0, 1, 1, "1")
            assert grown.code == ResponseCode.SUCCESS and grown.ext_fields["inSyncEpoch"] == "2"
            assert (await heartbeat(client, addr, 0, 1, 800, "MASTER", confirmed=700))["inSync"] == "1"

            # The master falls silent; the slave (holding what it acknowledged) is promoted.
            async def promoted():
                answer = await heartbeat(client, addr, 1, 1, 750, "SLAVE")
                return answer if answer["promote"] == "true" else None
            answer = await wait_until(promoted, 10, "broker 1 told to take up epoch 2")
            assert (answer["role"], answer["epoch"]) == ("MASTER", "2")
            # Meanwhile the old master, if it speaks, is told to wait (it must take no sends).
            assert (await heartbeat(client, addr, 0, 1, 900, "MASTER"))["role"] == "WAIT"
            done = await client.invoke(addr, RemotingCommand.request(CONTROLLER_PROMOTED, {
                "brokerName": "grp", "brokerId": 1, "epoch": 2, "startOffset": 750}), 5)
            assert done.code == ResponseCode.SUCCESS, done.remark
            stale = await client.invoke(addr, RemotingCommand.request(CONTROLLER_PROMOTED, {
                "brokerName": "grp", "brokerId": 0, "epoch": 3, "startOffset": 900}), 5)
            assert stale.code != ResponseCode.SUCCESS
        finally:
            await controller.stop()

        restarted = Controller(config)
        await restarted.start()
        try:
            group = await group_state(client, restarted.address)
            assert [(h["epoch"], h["startOffset"], h["masterId"]) for h in group["history"]] == [(1, 0, 0), (2, 750, 1)]
            assert (group["inSync"], group["inSyncEpoch"]) == ([], 3)  # the new master alone, kept on disk
            await heartbeat(client, restarted.address, 1, 2, 750, "MASTER")
            # The old master returns with 150 bytes written after epoch 2 began: cut back to 750.
            back = await heartbeat(client, restarted.address, 0, 1, 900, "NONE")
            assert (back["role"], back["epoch"], back["truncateOffset"], back["masterId"]) == ("SLAVE", "2", "750", "1")
        finally:
            await restarted.stop()
            await client.close()

    asyncio.run(scenario())


def test_controller_refuses_to_start_on_a_damaged_state_file(tmp_path):
    (tmp_path / "controller.json").write_text("{not json")
    controller = Controller(ControllerConfig(listen_port=0, data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="refusing to start without its epochs"):
        asyncio.run(controller.start())


@pytest.mark.parametrize("unclean", [False, True])
def test_a_broker_epochs_behind_is_promoted_only_uncleanly_and_first_cuts_what_the_group_does_not_share(
        tmp_path, unclean):
    """Broker 1 became master of epoch 2 (from offset 750) and died; broker 0, back with its own
    unacknowledged tail of epoch 1 (to 900), is no clean successor: it never followed epoch 2.
    With enableElectUncleanMaster it is promoted, told to cut back to 750 first."""
    async def scenario():
        controller = Controller(ControllerConfig(listen_port=0, data_dir=str(tmp_path), failover_timeout=1000,
                                                 enable_elect_unclean_master=unclean))
        await controller.start()
        client = RemotingClient()
        try:
            addr = controller.address
            await heartbeat(client, addr, 0, 0, 0, "NONE")
            await heartbeat(client, addr, 0, 1, 700, "MASTER", confirmed=700)
            await heartbeat(client, addr, 1, 1, 750, "SLAVE")
            assert (await alter(client, addr, 0, 1, 1, "1")).code == ResponseCode.SUCCESS

            async def told_to_promote(broker_id, epoch, max_offset):
                answer = await heartbeat(client, addr, broker_id, epoch, max_offset, "SLAVE")
                return answer if answer["promote"] == "true" else None
            await wait_until(lambda: told_to_promote(1, 1, 750), 10, "broker 1 told to take up epoch 2")
            done = await client.invoke(addr, RemotingCommand.request(CONTROLLER_PROMOTED, {
                "brokerName": "grp", "brokerId": 1, "epoch": 2, "startOffset": 750}), 5)
            assert done.code == ResponseCode.SUCCESS
            await heartbeat(client, addr, 1, 2, 750, "MASTER")
            # broker 1 goes silent; broker 0 is back as a would-be slave of epoch 1 with offset 900
            if not unclean:
                for _ in range(30):
                    assert (await heartbeat(client, addr, 0, 1, 900, "SLAVE"))["promote"] == "false"
                    await asyncio.sleep(0.1)
                return
            answer = await wait_until(lambda: told_to_promote(0, 1, 900), 10, "broker 0 told to take up epoch 3")
            assert (answer["epoch"], answer["truncateOffset"]) == ("3", "750")
        finally:
            await controller.stop()
            await client.close()

    asyncio.run(scenario())


class HeldStateStore:
    """A state store whose writes wait until released: a slow disk (or a kill -9 during the
    write), a fault the test cannot cause with a real file at the right moment."""

    description = "held in memory"

    def __init__(self) -> None:
        self.saved: str | None = None
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def load(self) -> str | None:
        return self.saved

    async def save(self, data: str) -> None:
        self.writing.set()
        await self.release.wait()
        self.saved = data


def test_the_state_shows_an_in_sync_change_only_once_it_is_written():
    """A reader (an operator, a test, the metrics) must never see a set the controller would
    not have after a restart: GET_STATE during the write of a change shows it only afterwards."""
    async def scenario():
        store = HeldStateStore()
        store.release.set()
        controller = Controller(ControllerConfig(listen_port=0, failover_timeout=1000), store)
        await controller.start()
        client = RemotingClient()
        try:
            addr = controller.address
            await heartbeat(client, addr, 0, 0, 0, "NONE")
            await heartbeat(client, addr, 1, 0, 0, "NONE")
            store.release.clear()
            store.writing.clear()
            growing = asyncio.create_task(alter(client, addr, 0, 1, 1, "1"))
            await asyncio.wait_for(store.writing.wait(), 5)
            reading = asyncio.create_task(client.invoke(addr, RemotingCommand.request(CONTROLLER_GET_STATE), 5))
            await asyncio.sleep(0.3)  # time for the read to be answered, were it not held back
            assert not reading.done(), "GET_STATE answered while the change was being written"
            store.release.set()
            assert (await growing).code == ResponseCode.SUCCESS
            assert json.loads((await reading).body)["groups"]["grp"]["inSync"] == [1]
            assert json.loads(store.saved)["groups"]["grp"]["inSync"] == [1]
        finally:
            store.release.set()
            await controller.stop()
            await client.close()

    asyncio.run(scenario())


@pytest.fixture
def small_disk(tmp_path):
    with small_filesystem_or_skip(tmp_path, 1, "the controller's full-disk test") as path:
        yield path


def test_a_change_the_controller_cannot_write_is_undone_refused_and_succeeds_once_there_is_room(small_disk):
    """A full disk under the only controller: the in-sync change it could not write is refused
    and not shown (a restart would not have it); with room again the master's retry commits it,
    and a restarted controller has it."""
    async def scenario():
        config = ControllerConfig(listen_port=0, data_dir=str(small_disk / "controller"), failover_timeout=1000)
        controller = Controller(config)
        await controller.start()
        client = RemotingClient()
        try:
            addr = controller.address
            await heartbeat(client, addr, 0, 0, 0, "NONE")  # broker 0 master of epoch 1, written
            await heartbeat(client, addr, 1, 0, 0, "NONE")
            filler = fill_completely(small_disk)
            refused = await alter(client, addr, 0, 1, 1, "1")
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert "not written" in refused.remark and "No space left" in refused.remark
            group = await group_state(client, addr)
            assert (group["inSync"], group["inSyncEpoch"]) == ([], 1)
            assert (await heartbeat(client, addr, 0, 1, 0, "MASTER"))["inSync"] == ""
            filler.unlink()
            retried = await alter(client, addr, 0, 1, 1, "1")  # the same proposal, from the same version
            assert retried.code == ResponseCode.SUCCESS, retried.remark
            assert retried.ext_fields["inSyncEpoch"] == "2"
        finally:
            await controller.stop()
        try:
            assert await kept_in_sync(config, client) == ([1], 2)
        finally:
            await client.close()

    asyncio.run(scenario())
