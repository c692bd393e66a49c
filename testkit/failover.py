"""For the failover tests and the local chaos suite: a broker group of two FerryMQ broker processes under the
controller (enableControllerMode), beside a name server and a ``ferrymq controller`` process.

Broker "master" has brokerId 0 (the controller's first master), "slave" brokerId 1; after a
failover the names only say which process is which, not who is master. Both run with the same
brokerRole (how a master acknowledges)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.processes import BrokerPair, FerryProcess
from testkit.ports import free_port
from testkit.wait import wait_until

GROUP = "ha-broker"  # BrokerPair's brokerName
CLUSTER = "HACluster"  # BrokerPair's brokerClusterName


@dataclass
class FailoverPair(BrokerPair):
    failover_timeout: int = 3000  # ms
    controller_port: int = 0

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    @property
    def controller_dir(self) -> Path:
        return self.tmp / "controller"

    def start_controller(self) -> None:
        self.controller_port = self.controller_port or free_port()
        self.processes["controller"] = FerryProcess(
            ["controller", "--port", str(self.controller_port), "--data-dir", str(self.controller_dir),
             "--failover-timeout", str(self.failover_timeout)],
            "controller is ready", self.tmp / f"controller-{time.time_ns()}.log").start()

    def _member(self, broker_id: int) -> list[str]:
        return [f"brokerRole={self.master_role}", f"brokerId={broker_id}", "enableControllerMode=true",
                f"controllerAddr={self.controller}", "controllerHeartbeatInterval=300"]

    def start_master(self, *settings: str) -> None:
        self.master_port = self.master_port or free_port()
        self.processes["master"] = self._broker("master", self.master_port, self.master_dir,
                                                [*self._member(0), *settings]).start()

    def start_slave(self, *settings: str) -> None:
        self.slave_port = self.slave_port or free_port()
        self.processes["slave"] = self._broker("slave", self.slave_port, self.slave_dir,
                                               [*self._member(1), *settings]).start()

    def addr(self, name: str) -> str:
        return f"127.0.0.1:{self.master_port if name == 'master' else self.slave_port}"

    def dir(self, name: str) -> Path:
        return self.master_dir if name == "master" else self.slave_dir


async def create_topic(namesrv: str, topic: str, queues: int = 4, cluster: str = CLUSTER) -> None:
    """Create ``topic`` on the group's master once it registered with the name server."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        async def master_registered():
            try:
                return await admin.master_addrs(cluster)
            except MQClientError:  # the cluster is not known yet
                return None
        await wait_until(master_registered, 30, "the master registered")
        await admin.create_topic(topic, read_queues=queues, write_queues=queues, cluster=cluster)


async def controller_state(controller: str, group: str = GROUP) -> dict:
    """The controller's view of broker group ``group`` (CONTROLLER_GET_STATE)."""
    client = RemotingClient()
    try:
        answer = await client.invoke(controller, RemotingCommand.request(CONTROLLER_GET_STATE), 5)
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return json.loads(answer.body)["groups"].get(group, {})


@dataclass
class FailoverTrio(FailoverPair):
    """Three brokers of one group: "master" (brokerId 0), "slave" (1) and "slave2" (2)."""

    slave2_port: int = 0

    @property
    def slave2_dir(self) -> Path:
        return self.tmp / "slave2"

    def start_slave2(self, *settings: str) -> None:
        self.slave2_port = self.slave2_port or free_port()
        self.processes["slave2"] = self._broker("slave2", self.slave2_port, self.slave2_dir,
                                                [*self._member(2), *settings]).start()

    def addr(self, name: str) -> str:
        port = {"master": self.master_port, "slave": self.slave_port, "slave2": self.slave2_port}[name]
        return f"127.0.0.1:{port}"

    def dir(self, name: str) -> Path:
        return {"master": self.master_dir, "slave": self.slave_dir, "slave2": self.slave2_dir}[name]
