"""The broker's replication role, wired from its settings: a master (ASYNC_MASTER or
SYNC_MASTER) serves slaves on haListenPort; a SLAVE refuses puts, copies its master's
CommitLog and, every slaveSynchronizeInterval, its metadata. The broker hands this what
it owns (store, tables, remoting client) and tells it what name servers answered."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ferrymq.broker.config import SLAVE, SYNC_MASTER, BrokerConfig
from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.broker.ha.epochs import EpochFile
from ferrymq.broker.ha.failover import FailoverAgent
from ferrymq.broker.ha.frames import encode_hello
from ferrymq.broker.ha.master import HAMaster, HAMasterSettings, SlaveState
from ferrymq.broker.ha.slave import HASlave, HASlaveSettings
from ferrymq.broker.ha.slave_sync import TIMER_CHECKPOINT_INTERVAL, SlaveSynchronize
from ferrymq.broker.schedule import ScheduleMessageService
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.common.tasks import TaskSet
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import RegisterBrokerResponseHeader
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.config import StoreConfig
from ferrymq.store.results import PutStatus

log = logging.getLogger(__name__)

SLAVE_REFUSAL = "the broker is a slave (brokerRole=SLAVE): messages are put to its master"
WAITING_REFUSAL = "the broker waits for the controller to say whether it is master (enableControllerMode)"
WAITING_READS = ("the broker waits for the controller to say whether it is master (enableControllerMode): until "
                 "then it serves no pulls nor POP receives, since its log may hold messages the group does not keep")


class Replication:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig, store: AsyncMessageStore,
                 client: RemotingClient, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, schedule: ScheduleMessageService,
                 persist: Callable[[], Awaitable[None]]) -> None:
        if config.role_error():
            raise ValueError(config.role_error())
        self.config = config
        self.store_config = store_config
        self.store = store
        self._client = client
        self._tables = (topics, offsets, groups, schedule, persist)
        self._tasks = TaskSet("replication", log)
        self._slave_tasks: TaskSet | None = None
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.sync: SlaveSynchronize | None = None
        # Controller mode: how this broker acts as master, whatever it is now (config.broker_role
        # and config.broker_id follow the role the controller gives it: SLAVE and its own id, or
        # the master role and id 0); registration waits until the controller has answered.
        self.master_role = config.broker_role
        self.registrable = asyncio.Event()
        self.failover: FailoverAgent | None = None
        self._hello: Callable[[], bytes] | None = None
        # Why puts are refused now, by precedence: fenced (or no role yet), then an in-sync set
        # below minInSyncReplicas.
        self._fence_reason: str | None = None
        self._shortfall: str | None = None
        self._reads_refused: str | None = None
        if config.enable_controller_mode:
            config.broker_role = SLAVE
            epochs = EpochFile(store_config.store_path_root_dir)
            identity = config.broker_id
            self._hello = lambda: encode_hello(identity, epochs.last_epoch)
            self._fence_reason = WAITING_REFUSAL
            self._reads_refused = WAITING_READS
            self._apply_refusal()
            self.failover = FailoverAgent(config, self, store, epochs, client)
        elif config.is_slave:
            self.registrable.set()
            # The store takes data only from the master (RocketMQ's store refuses puts on a slave).
            store.refuse_puts(SLAVE_REFUSAL)
            self._make_slave(config.ha_master_address)
        else:
            self.registrable.set()
            self._make_master()

    def _make_master(self) -> None:
        config, store = self.config, self.store
        port = config.ha_listen_port
        if port < 0:
            port = config.listen_port + 1
        self.master = HAMaster(store, HAMasterSettings(
            config.listen_host, port, config.ha_transfer_batch_size, config.ha_send_heartbeat_interval,
            config.ha_housekeeping_interval, config.ha_slave_fallbehind_max,
            self.store_config.mapped_file_size_commit_log, config.ha_async_transfer_linger_mills),
            lambda: self.store_config.sync_flush_timeout,
            push_on_write=self.master_role == SYNC_MASTER)
        if self.master_role == SYNC_MASTER:
            store.replication_wait = self.master.replication_wait

    def _make_slave(self, master_address: str | None) -> None:
        config, store = self.config, self.store
        self.slave = HASlave(store, store.replica_appender(),
                             HASlaveSettings(config.ha_send_heartbeat_interval, config.ha_housekeeping_interval),
                             master_address, hello=self._hello)
        adopt = store.adopt_timers_fired if store.timers_enabled else None
        self.sync = SlaveSynchronize(self._client, *self._tables, adopt_timers_fired=adopt)

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
            self._start_slave_tasks()
            log.info("broker %s is a slave (brokerId %d) of %s", self.config.broker_name, self.config.broker_id,
                     self.config.ha_master_address or "the master the name server names")
        if self.failover is not None:
            # Until the controller gives the role, lookups serve only what every in-sync replica
            # held before the restart (the checkpoint's confirm offset); pulls wait altogether.
            self.store.limit_lookups(self.store.recorded_confirm_offset)
            self._tasks.spawn(self.failover.run(), "failover-agent")

    def _start_slave_tasks(self) -> None:
        self._slave_tasks = TaskSet("replication slave", log)
        self._slave_tasks.spawn(self.slave.run(), "ha-slave")
        self._slave_tasks.every(self.config.slave_synchronize_interval / 1000, self.sync.sync_all,
                                "slave-synchronize", quiet=(RemotingError, OSError))
        self._slave_tasks.every(TIMER_CHECKPOINT_INTERVAL, self.sync.sync_timer_checkpoint,
                                "timer-checkpoint-sync", quiet=(RemotingError, OSError))

    async def stop(self) -> None:
        if self.slave is not None and self.failover is not None:
            await self.slave.say_goodbye()  # a graceful stop: the master need not wait for this slave
        await self._tasks.close()
        await self.stop_slave()
        if self.master is not None:
            await self.master.stop()

    # ------------------------------------------------------------------ role changes (controller mode)

    async def stop_slave(self) -> None:
        """Stop copying from the master (and its metadata); nothing more is written to the store by it."""
        if self._slave_tasks is not None:
            await self._slave_tasks.close()
            self._slave_tasks = None
        self.slave = self.sync = None

    async def follow(self, master_ha_addr: str, master_addr: str, slave_id: int) -> None:
        """Act as a slave copying from the master at ``master_ha_addr`` (HA) / ``master_addr``,
        registered with the name servers as brokerId ``slave_id``."""
        self.config.broker_role = SLAVE
        self.config.broker_id = slave_id
        self._fence_reason = SLAVE_REFUSAL
        self._apply_refusal()
        if self.master is not None:
            self.master.step_down()
        if self.slave is None:
            self._make_slave(master_ha_addr)
            self._start_slave_tasks()
            log.info("broker %s (id %d) follows master %s (HA %s)", self.config.broker_name, self.config.broker_id,
                     master_addr, master_ha_addr)
        self.slave.update_master_address(master_ha_addr)
        self.sync.master_addr = master_addr
        self._reads_refused = None  # what the group does not keep is cut by now (FailoverAgent._follow)
        self.store.limit_lookups(None)
        self.registrable.set()

    async def lead(self, epoch: int, in_sync: frozenset[int], in_sync_epoch: int) -> None:
        """Act as the group's master (brokerId 0) of ``epoch``: serve slaves, take puts,
        acknowledged by the in-sync set the controller committed."""
        await self.stop_slave()
        if self.master is None:
            self._make_master()
            await self.master.start(any_port_if_taken=self.config.ha_listen_port < 0)
        self.master.track_in_sync(epoch, in_sync, in_sync_epoch)
        self.config.broker_role = self.master_role
        self.config.broker_id = 0
        self._fence_reason = None
        self._reads_refused = None
        self.store.limit_lookups(None)
        self._check_in_sync()
        self.registrable.set()

    def set_in_sync(self, members: frozenset[int], in_sync_epoch: int) -> None:
        """The in-sync set the controller committed (a master only)."""
        if self.master is not None:
            self.master.set_in_sync(members, in_sync_epoch)
            self._check_in_sync()

    def _check_in_sync(self) -> None:
        """Refuse puts while the set (the master included) is smaller than minInSyncReplicas."""
        size, wanted = 1 + len(self.master.in_sync or ()), self.config.min_in_sync_replicas
        self._shortfall = (f"in-sync replicas not enough: {size} in the in-sync set, minInSyncReplicas is {wanted}"
                           if size < wanted else None)
        self._apply_refusal()

    def fence(self, reason: str) -> None:
        """Refuse puts (and stop registering) until ``unfence``: another broker may be master now."""
        self._fence_reason = reason
        self._apply_refusal()
        self.registrable.clear()

    def unfence(self) -> None:
        self._fence_reason = None
        self._apply_refusal()
        self.registrable.set()

    def read_refusal(self) -> str | None:
        """Why pulls are refused now: only while a broker in controller mode waits for its role."""
        return self._reads_refused

    @property
    def fenced(self) -> bool:
        return self._fence_reason is not None

    def _apply_refusal(self) -> None:
        if self._fence_reason is not None:
            self.store.refuse_puts(self._fence_reason, PutStatus.SERVICE_NOT_AVAILABLE)
        elif self._shortfall is not None:
            self.store.refuse_puts(self._shortfall, PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        else:
            self.store.refuse_puts(None)

    def confirmed_offset(self) -> int:
        """A master: the offset a successor must hold so that nothing acknowledged is lost (SYNC:
        the end of the last put answered PUT_OK; ASYNC: what its best slave acknowledged)."""
        if self.master is None:
            return 0
        if self.master_role == SYNC_MASTER:
            return self.master.acknowledged_end
        return self.master.acked_offset if self.master.in_sync is None else self.master.confirmed()

    def registered(self, answer: RemotingCommand) -> None:
        """A name server's REGISTER_BROKER answer: a slave learns its master's addresses there
        (in controller mode from the controller instead)."""
        if self.slave is None or self.failover is not None:
            return
        header = RegisterBrokerResponseHeader.read(answer)
        master_addr, ha_addr = header.master_addr, header.ha_server_addr
        if ha_addr and not self.config.ha_master_address:
            self.slave.update_master_address(ha_addr)
        if master_addr:
            self.sync.master_addr = master_addr

    def status(self) -> dict:
        """Role and, per slave, acknowledged offset and lag in bytes (metrics, admin)."""
        head = self.store.max_phy_offset
        out: dict = {"role": self.config.broker_role, "maxPhyOffset": head}
        if self.failover is not None:
            out["epoch"] = self.failover.epoch
            out["identity"] = self.failover.identity  # its own brokerId (which pod it is), whatever its role
        if self.master is not None:
            out["slaves"] = [_slave_status(s, head, self.master.in_sync) for s in self.master.slaves]
            if self.master.in_sync is not None:
                out.update(inSync=sorted(self.master.in_sync), inSyncEpoch=self.master.in_sync_epoch)
        if self.slave is not None:
            out.update(masterAddress=self.slave.master_address, connected=self.slave.connected,
                       confirmedOffset=self.slave.confirmed_offset, masterOffset=self.slave.master_offset)
        elif self.master is None:  # controller mode, no role yet (or between roles): copying from nobody
            out.update(masterAddress=None, connected=False, confirmedOffset=head, masterOffset=head)
        return out


def _slave_status(state: SlaveState, head: int, in_sync: frozenset[int] | None) -> dict:
    out = {"address": state.address, "ackedOffset": state.acked_offset,
           "lagBytes": max(0, head - state.acked_offset) if state.acked_offset >= 0 else head}
    if in_sync is not None:  # controller mode: only a member of the committed in-sync set can be promoted
        out["inSync"] = state.identity in in_sync
    return out
