"""The broker's replication role, wired from its settings: a master (ASYNC_MASTER or
SYNC_MASTER) serves slaves on haListenPort; a SLAVE refuses puts, copies its master's
CommitLog and, every slaveSynchronizeInterval, its metadata. The broker hands this what
it owns (store, tables, remoting client) and tells it what name servers answered."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from ferrymq.broker.async_store import AsyncMessageStore
from ferrymq.broker.config import SYNC_MASTER, BrokerConfig
from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.ha.master import HAMaster, HAMasterSettings, SlaveState
from ferrymq.broker.ha.slave import HASlave, HASlaveSettings
from ferrymq.broker.ha.slave_sync import SlaveSynchronize
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common.tasks import TaskSet
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.store.config import StoreConfig

log = logging.getLogger(__name__)

SLAVE_REFUSAL = "the broker is a slave (brokerRole=SLAVE): messages are put to its master"


class Replication:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig, store: AsyncMessageStore,
                 client: RemotingClient, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, schedule: ScheduleMessageService,
                 persist: Callable[[], Awaitable[None]]) -> None:
        if config.role_error():
            raise ValueError(config.role_error())
        self.config = config
        self.store = store
        self._tasks = TaskSet("replication", log)
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.sync: SlaveSynchronize | None = None
        if config.is_slave:
            # The store takes data only from the master (RocketMQ's store refuses puts on a slave).
            store.sync_store.refuse_puts = SLAVE_REFUSAL
            self.slave = HASlave(store, store.sync_store.replica_appender(),
                                 HASlaveSettings(config.ha_send_heartbeat_interval, config.ha_housekeeping_interval),
                                 config.ha_master_address)
            self.sync = SlaveSynchronize(client, topics, offsets, groups, schedule, persist)
        else:
            port = config.ha_listen_port
            if port < 0:
                port = config.listen_port + 1
            self.master = HAMaster(store, HAMasterSettings(
                config.listen_host, port, config.ha_transfer_batch_size, config.ha_send_heartbeat_interval,
                config.ha_housekeeping_interval, config.ha_slave_fallbehind_max,
                store_config.mapped_file_size_commit_log), lambda: store_config.sync_flush_timeout)
            if config.broker_role == SYNC_MASTER:
                store.replication_wait = self.master.replication_wait

    @property
    def ha_port(self) -> int:
        """The port this broker registers as its haServerAddr (a slave's would-be port)."""
        if self.master is not None:
            return self.master.port
        return self.config.listen_port + 1 if self.config.ha_listen_port < 0 else self.config.ha_listen_port

    async def start(self) -> None:
        if self.master is not None:
            await self.master.start(any_port_if_taken=self.config.ha_listen_port < 0)
        if self.slave is not None:
            self._tasks.spawn(self.slave.run(), "ha-slave")
            self._tasks.every(self.config.slave_synchronize_interval / 1000, self.sync.sync_all, "slave-synchronize",
                              quiet=(RemotingError, OSError))
            log.info("broker %s is a slave (brokerId %d) of %s", self.config.broker_name, self.config.broker_id,
                     self.config.ha_master_address or "the master the name server names")

    async def stop(self) -> None:
        await self._tasks.close()
        if self.master is not None:
            await self.master.stop()

    def registered(self, answer: RemotingCommand) -> None:
        """A name server's REGISTER_BROKER answer: a slave learns its master's addresses there."""
        if self.slave is None:
            return
        master_addr = answer.get_str("masterAddr") if answer.ext_fields else None
        ha_addr = answer.get_str("haServerAddr") if answer.ext_fields else None
        if ha_addr and not self.config.ha_master_address:
            self.slave.update_master_address(ha_addr)
        if master_addr:
            self.sync.master_addr = master_addr

    def status(self) -> dict:
        """Role and, per slave, acknowledged offset and lag in bytes (metrics, admin)."""
        head = self.store.max_phy_offset
        out: dict = {"role": self.config.broker_role, "maxPhyOffset": head}
        if self.master is not None:
            out["slaves"] = [_slave_status(s, head) for s in self.master.slaves]
        if self.slave is not None:
            out.update(masterAddress=self.slave.master_address, connected=self.slave.connected,
                       confirmedOffset=self.slave.confirmed_offset, masterOffset=self.slave.master_offset)
        return out


def _slave_status(state: SlaveState, head: int) -> dict:
    return {"address": state.address, "ackedOffset": state.acked_offset,
            "lagBytes": max(0, head - state.acked_offset) if state.acked_offset >= 0 else head}
