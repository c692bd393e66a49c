"""A broker's side of failover (``enableControllerMode``): it asks the controller what to be.

Every ``controllerHeartbeatInterval`` the broker reports its identity (brokerName, its own
brokerId), addresses, last epoch, CommitLog end and, as master, the offset a successor must
hold. The answer is its role:
- MASTER: serve as the group's master (brokerId 0 in registrations); with ``promote``, first
  stop copying from the old master, report where the CommitLog now ends (that is where the new
  epoch starts; the controller records it with fsync) and write it to the epoch file;
- SLAVE: truncate the CommitLog back to ``truncateOffset`` when told to (what this broker wrote
  after the last epoch it shares with the group, never acknowledged under SYNC_MASTER), record
  the epoch, and copy from the master the answer names;
- WAIT: no master to follow yet; a broker that was master stops taking sends.
Before its first answer the broker takes no sends and does not register with the name servers.

The in-sync set (RocketMQ 5's SyncStateSet): the controller keeps, per group, the slaves that
hold everything the master acknowledged, and elects only among them. A SYNC_MASTER
acknowledges a send once every member holds it (broker/ha/master.py); the master proposes
taking out a member that fell behind or went away, and taking in a slave that caught up, and
the change applies only once the controller has committed it (CONTROLLER_ALTER_IN_SYNC, a
compare-and-swap on the set's version). So the master keeps acknowledging while the controller
is away, as long as its members keep up, and an isolated master can never shrink the set to
itself.

Fencing: a master refuses sends and drops its clients' connections (``on_fenced``) at once
when it has lost the controller for longer than the failover timeout (less one heartbeat
interval, so before the controller may elect) and has no member of the in-sync set connected
either: then another broker may be elected, and what this one would acknowledge alone could
be lost. With the master the set's only member no clean election is possible and it keeps
serving (unless the controller elects uncleanly, which its answers say). The fence lifts when
the controller answers again or a member reconnects in this epoch. A master the controller has
replaced stops the broker process (``on_demoted``): restarted, it rejoins as a slave after
truncating, through the same path as any returning broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Callable, Protocol

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.ha.controller_link import ControllerLink
from ferrymq.broker.ha.epochs import EpochFile
from ferrymq.broker.ha.master import HAMaster
from ferrymq.common.controller_protocol import (
    CONTROLLER_ALTER_IN_SYNC,
    CONTROLLER_HAND_OVER,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_PROMOTED,
    MASTER,
    NONE,
    SLAVE,
)
from ferrymq.common.tasks import within
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import (
    AlterInSyncHeader,
    ControllerHandOverHeader,
    ControllerHeartbeatHeader,
    ControllerHeartbeatResponseHeader,
    ControllerPromotedHeader,
    HandOverResponseHeader,
    InSyncEpochResponseHeader,
)
from ferrymq.store.asyncio_store import AsyncMessageStore
from ferrymq.store.results import PutStatus

log = logging.getLogger(__name__)

FENCED_REFUSAL = ("the broker lost the controller for longer than the failover timeout and has no in-sync slave: it "
                  "may not be master any more, so it takes no sends until the controller or a slave is back")
DEMOTED_REFUSAL = "another broker is master of this group now (the controller said so): sends go there"
HANDING_OVER_REFUSAL = ("the broker is shutting down and hands its group over to an in-sync slave: sends go to the "
                        "new master")


class Roles(Protocol):
    """What the agent drives: the broker's replication role (ha/replication.py's Replication)."""

    master: HAMaster | None
    ha_port: int

    def confirmed_offset(self) -> int: ...
    async def lead(self, epoch: int, in_sync: frozenset[int], in_sync_epoch: int) -> None: ...
    async def follow(self, master_ha_addr: str, master_addr: str, slave_id: int) -> None: ...
    async def stop_slave(self) -> None: ...
    def set_in_sync(self, members: frozenset[int], in_sync_epoch: int) -> None: ...
    def fence(self, reason: str) -> None: ...
    def unfence(self) -> None: ...


class FailoverAgent:
    def __init__(self, config: BrokerConfig, replication: Roles, store: AsyncMessageStore,
                 epochs: EpochFile, client: RemotingClient) -> None:
        self.config = config
        self.replication = replication
        self.store = store
        self.epochs = epochs
        self.client = client
        self.link = ControllerLink(config.controller_addr, client)  # one or several controller replicas
        self.identity = config.broker_id  # the broker's id in its group, whatever role it has now
        self.acting = NONE
        self.epoch = 0
        self.failover_timeout_ms = 0  # from the controller's answers
        self._last_ok_sent = 0.0  # monotonic time the last answered heartbeat was sent
        self._fenced = False  # refused by the controller's answer (WAIT, SLAVE) while master
        self._isolated = False  # fenced by this broker itself: no controller, no in-sync slave
        self._unclean = False  # the controller may elect a slave outside the in-sync set
        self._unreachable_logged = False
        # Set when something _cut_off depends on may have changed (an answer from the controller,
        # the role, the master's slaves and in-sync set): the isolation watch looks again.
        self._recheck = asyncio.Event()
        self.on_lead: Callable[[], None] | None = None  # became master: start master-only services
        self.on_role_change: Callable[[], None] | None = None  # register with the name servers now
        self.on_demoted: Callable[[str], None] | None = None  # replaced while master: stop the broker
        self.on_fenced: Callable[[], None] | None = None  # fenced itself: drop the clients' connections

    @property
    def interval_s(self) -> float:
        return self.config.controller_heartbeat_interval / 1000

    async def run(self) -> None:
        await asyncio.to_thread(self.epochs.load)
        self.epoch = self.epochs.last_epoch
        watch = asyncio.ensure_future(self._watch_isolation())
        try:
            while True:
                sent = time.monotonic()
                answer = await self._heartbeat()
                if answer is not None:
                    await self._apply(answer, sent)
                    self._recheck.set()
                    if self.acting == MASTER and not self._fenced:
                        await self._alter_in_sync()
                await asyncio.sleep(self.interval_s)
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    async def _invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return await self.link.invoke(request, timeout)

    async def _heartbeat(self) -> RemotingCommand | None:
        cfg = self.config
        request = RemotingCommand.request(CONTROLLER_HEARTBEAT, ControllerHeartbeatHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_id=self.identity,
            broker_addr=cfg.advertised_addr(), ha_server_addr=f"{cfg.advertised_host()}:{self.replication.ha_port}",
            epoch=self.epochs.last_epoch, max_offset=self.store.max_phy_offset,
            confirmed_offset=self.replication.confirmed_offset(), acting=self.acting).to_ext_fields())
        try:
            answer = await self._invoke(request, max(self.interval_s * 2, 1.0))
        except (RemotingError, OSError, asyncio.TimeoutError) as exc:
            if not self._unreachable_logged:
                log.warning("controller %s unreachable: %s", cfg.controller_addr, exc)
                self._unreachable_logged = True
            return None
        if answer.code != ResponseCode.SUCCESS:
            log.error("controller %s refused the heartbeat: %s", cfg.controller_addr, answer.remark)
            return None
        if self._unreachable_logged:
            log.info("controller %s reachable again", cfg.controller_addr)
            self._unreachable_logged = False
        return answer

    async def _apply(self, response: RemotingCommand, sent: float) -> None:
        answer = ControllerHeartbeatResponseHeader.read(response)
        role, epoch = answer.role, answer.epoch
        if answer.failover_timeout is not None:
            self.failover_timeout_ms = answer.failover_timeout
        self._unclean = answer.unclean_election
        if role == MASTER:
            in_sync, in_sync_epoch = _members(answer.in_sync), answer.in_sync_epoch
            if answer.promote:
                if not await self._promote(epoch, answer.truncate_offset):
                    return
            elif self.acting != MASTER:
                start = answer.epoch_start_offset
                start = self.store.max_phy_offset if start is None else start
                await self._take_up(epoch, start, in_sync, in_sync_epoch)
            elif in_sync_epoch > self._in_sync_epoch():
                self.replication.set_in_sync(in_sync, in_sync_epoch)
            self._last_ok_sent = sent
            if self._fenced or self._isolated:
                self._fenced = self._isolated = False
                self.replication.unfence()
                log.warning("controller reachable again and this broker is still master of epoch %d: taking sends",
                            epoch)
        elif role == SLAVE:
            if self.acting == MASTER:
                self._demoted(epoch)
                return
            await self._follow(answer, epoch)
        elif self.acting == MASTER and not self._fenced:
            self._fenced = True
            self.replication.fence(DEMOTED_REFUSAL)
            log.warning("the controller is making another broker master (epoch after %d): taking no sends", epoch)
            self._drop_clients()

    async def hand_over(self) -> bool:
        """A controlled shutdown, as Kafka's and CloudNativePG's switchover: a master about to
        stop, with an in-sync slave, takes no more sends, waits (syncFlushTimeout at most) until
        its in-sync slaves hold everything it stored, and asks the controller to promote one of
        them now instead of a failover timeout after it fell silent. False when it did not hand
        over (no in-sync slave, fenced already, the controller unreachable or refusing): then the
        controller elects once this broker has been silent for the failover timeout."""
        master = self.replication.master
        if self.acting != MASTER or self._fenced or self._isolated or master is None or not master.in_sync:
            return False
        self._fenced = True
        self.replication.fence(HANDING_OVER_REFUSAL)
        end = self.store.max_phy_offset
        held = await master.held_up_to(end) is PutStatus.PUT_OK
        confirmed = end if held else self.replication.confirmed_offset()
        request = ControllerHandOverHeader(broker_name=self.config.broker_name, broker_id=self.identity,
                                           epoch=self.epoch, confirmed_offset=confirmed).request(CONTROLLER_HAND_OVER)
        try:
            answer = await self._invoke(request, max(self.interval_s * 2, 1.0))
        except (RemotingError, OSError, asyncio.TimeoutError) as exc:
            log.warning("handing %s over failed: %s (the controller elects once this broker is silent)",
                        self.config.broker_name, exc)
            return False
        if answer.code != ResponseCode.SUCCESS:
            log.warning("the controller refused the hand-over of %s: %s (it elects once this broker is silent)",
                        self.config.broker_name, answer.remark)
            return False
        successor = HandOverResponseHeader.read(answer)
        log.warning("shutting down: %s handed over at CommitLog offset %d%s; the controller promotes broker %d "
                    "to epoch %d", self.config.broker_name, confirmed, "" if held else " (what the slaves acknowledged)",
                    successor.successor_id, successor.epoch)
        return True

    def _in_sync_epoch(self) -> int:
        master = self.replication.master
        return master.in_sync_epoch if master is not None else -1

    async def _alter_in_sync(self) -> None:
        """Propose the in-sync set the master's links show; it applies once the controller committed it."""
        master = self.replication.master
        if master is None or master.in_sync is None:
            return
        wanted = master.proposed_in_sync(time.monotonic(), self.config.ha_max_time_slave_not_catchup / 1000)
        if wanted == master.in_sync:
            return
        # A slave taken in is waited for from now on, before the controller hears of it: what the
        # master acknowledges alone ends here, and the controller learns where (confirmedOffset),
        # so it never elects the newcomer short of that.
        if not wanted <= master.in_sync:
            master.expect(master.in_sync | wanted)
        request = RemotingCommand.request(CONTROLLER_ALTER_IN_SYNC, AlterInSyncHeader(
            broker_name=self.config.broker_name, broker_id=self.identity, epoch=self.epoch,
            in_sync_epoch=master.in_sync_epoch, in_sync=",".join(str(m) for m in sorted(wanted)),
            confirmed_offset=self.replication.confirmed_offset()).to_ext_fields())
        try:
            answer = await self._invoke(request, max(self.interval_s * 2, 1.0))
        except (RemotingError, OSError, asyncio.TimeoutError) as exc:
            log.info("proposing in-sync set %s failed: %s (proposed again next round)", sorted(wanted), exc)
            return  # a grown set stays expected: stricter until the controller answers
        if answer.code != ResponseCode.SUCCESS:
            master.expect(None)
            log.warning("the controller refused in-sync set %s: %s", sorted(wanted), answer.remark)
            return
        before = sorted(master.in_sync)
        agreed = InSyncEpochResponseHeader.read(answer).in_sync_epoch
        self.replication.set_in_sync(wanted, master.in_sync_epoch + 1 if agreed is None else agreed)
        log.warning("in-sync set of %s is now %s with the master (was %s, version %d)", self.config.broker_name,
                    sorted(wanted), before, master.in_sync_epoch)

    async def _promote(self, epoch: int, truncate: int) -> bool:
        """Become master of ``epoch``: stop copying, cut what the group does not share (only an
        unclean choice from an older epoch has any), report where the CommitLog ends, record it."""
        if self.acting == MASTER and self.epoch == epoch:
            return True
        log.warning("the controller names this broker master of epoch %d: stopping replication, reporting where "
                    "its CommitLog ends", epoch)
        await self.replication.stop_slave()
        await self._truncate(truncate, epoch)
        start = self.store.max_phy_offset
        request = ControllerPromotedHeader(broker_name=self.config.broker_name, broker_id=self.identity, epoch=epoch,
                                           start_offset=start).request(CONTROLLER_PROMOTED)
        try:
            answer = await self._invoke(request, 5.0)
        except (RemotingError, OSError, asyncio.TimeoutError) as exc:
            log.warning("reporting the promotion to epoch %d failed: %s (the next heartbeat decides)", epoch, exc)
            return False
        if answer.code != ResponseCode.SUCCESS:
            log.warning("the controller called off the promotion to epoch %d: %s", epoch, answer.remark)
            self.acting = NONE  # the next answer says whom to follow
            return False
        await asyncio.to_thread(self.epochs.append, epoch, start)
        log.warning("promoted to master of %s, epoch %d from CommitLog offset %d", self.config.broker_name, epoch,
                    start)
        await self._become_master(epoch, frozenset(), InSyncEpochResponseHeader.read(answer).in_sync_epoch or 0)
        return True

    async def _take_up(self, epoch: int, start: int, in_sync: frozenset[int], in_sync_epoch: int) -> None:
        """The controller names this broker master of ``epoch`` (at first start, or after a restart)."""
        if self.epochs.last_epoch < epoch:
            await asyncio.to_thread(self.epochs.append, epoch, start)
        log.info("master of %s, epoch %d, in-sync set %s", self.config.broker_name, epoch, sorted(in_sync))
        await self._become_master(epoch, in_sync, in_sync_epoch)

    async def _become_master(self, epoch: int, in_sync: frozenset[int], in_sync_epoch: int) -> None:
        await self.replication.lead(epoch, in_sync, in_sync_epoch)
        master = self.replication.master
        if master is not None and self._recheck.set not in master.membership_listeners:
            master.membership_listeners.append(self._recheck.set)
        self.acting, self.epoch = MASTER, epoch
        if self.on_lead is not None:
            self.on_lead()
        if self.on_role_change is not None:
            self.on_role_change()

    async def _follow(self, answer: ControllerHeartbeatResponseHeader, epoch: int) -> None:
        truncate = answer.truncate_offset
        if 0 <= truncate < self.store.max_phy_offset:
            await self.replication.stop_slave()
            await self._truncate(truncate, epoch)
        if self.epochs.last_epoch < epoch:
            await asyncio.to_thread(self.epochs.append, epoch, answer.epoch_start_offset or 0)
        master_ha, master_addr = answer.master_ha_addr, answer.master_addr
        changed = self.acting != SLAVE or self.epoch != epoch
        # A slave registers under its own id; broker 0 following another broker takes that
        # broker's id, free in the route while its owner registers as master (brokerId 0).
        slave_id = self.identity or answer.master_id
        if slave_id <= 0:
            log.error("the controller named no master id for this broker (0) to follow: waiting")
            return
        await self.replication.follow(master_ha, master_addr, slave_id)
        self.acting, self.epoch = SLAVE, epoch
        if changed and self.on_role_change is not None:
            self.on_role_change()

    async def _truncate(self, offset: int, epoch: int) -> None:
        if 0 <= offset < self.store.max_phy_offset:
            before = self.store.max_phy_offset
            end = await self.store.truncate(offset)
            log.warning("CommitLog truncated from offset %d to %d: the group's CommitLog went another way there "
                        "(epoch %d); what this broker wrote after it was never the group's", before, end, epoch)

    def _demoted(self, epoch: int) -> None:
        self.replication.fence(DEMOTED_REFUSAL)
        self._fenced = True
        log.error("the controller made another broker master (epoch %d) while this one was master: stopping; "
                  "restarted, it truncates what it wrote since and rejoins as a slave", epoch)
        if self.on_demoted is not None:
            self.on_demoted(f"replaced as master (epoch {epoch})")

    def _lease_s(self) -> float:
        """How long a master may go without the controller before it counts as cut off: less
        than the failover timeout by one heartbeat interval, so a master that fences itself has
        stopped before the controller (which counts from when it received that heartbeat) may elect."""
        timeout = self.failover_timeout_ms / 1000
        return max(timeout - self.interval_s, timeout / 2)

    def _cut_off(self, now: float) -> bool:
        """Lost the controller past the lease and, with it, every way of acknowledging safely: no
        member of the in-sync set connected (or none at all while the controller elects uncleanly)."""
        if now - self._last_ok_sent < self._lease_s():
            return False
        master = self.replication.master
        if master is None or not master.waited_for:  # a set being proposed counts: the controller
            return self._unclean  # may have committed it. The only member: no clean election replaces it
        return not master.member_connected()

    async def _watch_isolation(self) -> None:
        """Fence the master the moment it is cut off (not at the next heartbeat round, which a
        controller that does not answer may hold up), and lift the fence when a member is back.
        It looks again when the lease runs out and whenever the controller answers or the
        master's slaves or in-sync set change (``_recheck``), never on a timer of its own."""
        while True:
            self._recheck.clear()
            lease_ends = self._check_isolation(time.monotonic())
            timeout = None if lease_ends is None else max(0.0, lease_ends - time.monotonic())
            with contextlib.suppress(asyncio.TimeoutError):
                await within(self._recheck.wait(), timeout)

    def _check_isolation(self, now: float) -> float | None:
        """Fence or lift the fence as ``_cut_off`` says now; returns when the lease runs out if
        that is still ahead and would matter (a master taking sends), else None."""
        if self.acting != MASTER or self._fenced or not self.failover_timeout_ms:
            return None
        cut_off = self._cut_off(now)
        if cut_off and not self._isolated:
            self._isolated = True
            self.replication.fence(FENCED_REFUSAL)
            log.error("no answer from the controller for %.1f s and no in-sync slave connected: taking no "
                      "sends, dropping client connections", self._lease_s())
            self._drop_clients()
        elif self._isolated and not cut_off:
            self._isolated = False
            self.replication.unfence()
            log.warning("an in-sync slave of epoch %d is connected again: taking sends", self.epoch)
        lease_ends = self._last_ok_sent + self._lease_s()
        return lease_ends if now < lease_ends else None

    def _drop_clients(self) -> None:
        if self.on_fenced is not None:
            self.on_fenced()


def _members(text: str) -> frozenset[int]:
    """The in-sync set as the controller's answers carry it: comma-separated broker identities."""
    return frozenset(int(part) for part in text.split(",") if part.strip())
