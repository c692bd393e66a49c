"""ControllerLink against real ``ferrymq controller`` processes: a replica that is down is
skipped for the next, the one that answered is asked first from then on, and when none answers
the last error is raised. (Replicas that answer CONTROLLER_NOT_LEADER need a Lease: see
tests/k8s/test_controller_lease.py.)"""

from __future__ import annotations

import json

import pytest

from ferrymq.broker.ha.controller_link import ControllerLink
from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from tests.support import FerryProcess, free_port

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
