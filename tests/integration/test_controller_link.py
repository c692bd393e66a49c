"""ControllerLink against real ``ferrymq controller`` processes: a replica that is down is
skipped for the next, the one that answered is asked first from then on, and when none answers
the last error is raised; a replica's CONTROLLER_NOT_LEADER sends it to the leader it names.
(Real controller replicas behind a Lease: tests/k8s/test_controller_lease.py.)"""

from __future__ import annotations

import json

import pytest

from ferrymq.broker.ha.controller_link import ControllerLink, ControllerNotLeaderError
from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE, CONTROLLER_NOT_LEADER
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.server import RemotingServer
from testkit.ports import free_port
from testkit.processes import FerryProcess

pytestmark = pytest.mark.integration


def controller_process(tmp_path, port: int, name: str) -> FerryProcess:
    return FerryProcess(["controller", "--port", str(port), "--data-dir", str(tmp_path / name)],
                        "controller is ready", tmp_path / f"{name}.log")


async def test_the_link_skips_a_replica_that_is_down_and_sticks_to_the_one_that_answered(tmp_path):
    down_port, up_port = free_port(), free_port()
    up = controller_process(tmp_path, up_port, "up").start()
    replacement = None
    client = RemotingClient(connect_timeout=1.0)
    link = ControllerLink(f"127.0.0.1:{down_port};127.0.0.1:{up_port}", client)
    try:
        answer = await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 3)
        assert answer.code == ResponseCode.SUCCESS and "groups" in json.loads(answer.body)
        assert link.current == f"127.0.0.1:{up_port}"

        up.kill()  # SIGKILL: nobody answers now
        with pytest.raises(RemotingError):
            await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 1)

        # a controller comes up at the other address: the link moves there
        replacement = controller_process(tmp_path, down_port, "replacement").start()
        answer = await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 3)
        assert answer.code == ResponseCode.SUCCESS
        assert link.current == f"127.0.0.1:{down_port}"
    finally:
        await client.close()
        for p in (up, replacement):
            if p is not None:
                p.stop()


async def test_the_link_follows_the_leader_a_replica_names_and_says_when_none_leads(tmp_path):
    """Replicas that do not lead (stand-ins answering CONTROLLER_NOT_LEADER on real sockets, as
    a controller behind a Lease it does not hold does) send the link to the named leader, a real
    controller process; when every replica refuses, the link says no replica leads."""
    leader_port = free_port()
    leader = controller_process(tmp_path, leader_port, "leader").start()
    named = {"addr": f"127.0.0.1:{leader_port}"}
    asked: list[str] = []

    def follower(name: str) -> RemotingServer:
        server = RemotingServer("127.0.0.1", 0, name=name)

        async def refuse(req, conn):
            asked.append(name)
            return req.response(CONTROLLER_NOT_LEADER, ext_fields={"leaderAddr": named["addr"]})
        server.register_default(refuse)
        return server

    f1, f2 = follower("f1"), follower("f2")
    await f1.start()
    await f2.start()
    client = RemotingClient(connect_timeout=1.0)
    link = ControllerLink([f"127.0.0.1:{f1.port}", f"127.0.0.1:{f2.port}"], client)
    try:
        answer = await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 3)
        assert answer.code == ResponseCode.SUCCESS and asked == ["f1"]  # f1 named the leader: f2 never asked
        assert link.current == f"127.0.0.1:{leader_port}"

        leader.kill()
        named["addr"] = ""  # an election under way: nobody knows the leader
        asked.clear()
        with pytest.raises(ControllerNotLeaderError, match="no controller replica leads now"):
            await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 1)
        assert sorted(asked) == ["f1", "f2"]  # every replica asked once
    finally:
        await client.close()
        await f1.stop()
        await f2.stop()
        leader.stop()
