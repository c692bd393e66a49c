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

Fencing: a master whose last answered heartbeat was sent longer ago than the failover timeout
(less one heartbeat interval) refuses sends until the controller answers again, so an old
master cut off from the controller stops acknowledging before the controller can elect another
one. A master the controller has replaced stops the broker process (``on_demoted``): restarted,
it rejoins as a slave after truncating, through the same path as any returning broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable

from ferrymq.broker.async_store import AsyncMessageStore
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.ha.epochs import EpochFile
from ferrymq.common.controller_protocol import (
    CONTROLLER_HEARTBEAT,
    CONTROLLER_PROMOTED,
    MASTER,
    NONE,
    SLAVE,
    WAIT,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

if TYPE_CHECKING:
    from ferrymq.broker.ha.replication import Replication

log = logging.getLogger(__name__)

FENCED_REFUSAL = ("the broker lost the controller for longer than the failover timeout: it may not be master any "
                  "more, so it takes no sends until the controller answers")
DEMOTED_REFUSAL = "another broker is master of this group now (the controller said so): sends go there"


class FailoverAgent:
    def __init__(self, config: BrokerConfig, replication: "Replication", store: AsyncMessageStore,
                 epochs: EpochFile, client: RemotingClient) -> None:
        self.config = config
        self.replication = replication
        self.store = store
        self.epochs = epochs
        self.client = client
        self.identity = config.broker_id  # the broker's id in its group, whatever role it has now
        self.acting = NONE
        self.epoch = 0
        self.failover_timeout_ms = 0  # from the controller's answers
        self._last_ok_sent = 0.0  # monotonic time the last answered heartbeat was sent
        self._fenced = False
        self._unreachable_logged = False
        self.on_lead: Callable[[], None] | None = None  # became master: start master-only services
        self.on_role_change: Callable[[], None] | None = None  # register with the name servers now
        self.on_demoted: Callable[[str], None] | None = None  # replaced while master: stop the broker

    @property
    def interval_s(self) -> float:
        return self.config.controller_heartbeat_interval / 1000

    async def run(self) -> None:
        await asyncio.to_thread(self.epochs.load)
        self.epoch = self.epochs.last_epoch
        lease = asyncio.ensure_future(self._watch_lease())
        try:
            while True:
                sent = time.monotonic()
                answer = await self._heartbeat()
                if answer is not None:
                    await self._apply(answer, sent)
                await asyncio.sleep(self.interval_s)
        finally:
            lease.cancel()
            await asyncio.gather(lease, return_exceptions=True)

    async def _heartbeat(self) -> RemotingCommand | None:
        cfg = self.config
        request = RemotingCommand.request(CONTROLLER_HEARTBEAT, {
            "clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name, "brokerId": self.identity,
            "brokerAddr": cfg.advertised_addr(), "haServerAddr": f"{cfg.advertised_host()}:{self.replication.ha_port}",
            "epoch": self.epochs.last_epoch, "maxOffset": self.store.max_phy_offset,
            "confirmedOffset": self.replication.confirmed_offset(), "acting": self.acting})
        try:
            answer = await self.client.invoke(cfg.controller_addr, request, max(self.interval_s * 2, 1.0))
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

    async def _apply(self, answer: RemotingCommand, sent: float) -> None:
        role, epoch = answer.get_str("role", WAIT), answer.get_long("epoch", 0)
        self.failover_timeout_ms = answer.get_long("failoverTimeout", self.failover_timeout_ms)
        if role == MASTER:
            if answer.get_bool("promote"):
                if not await self._promote(epoch, answer.get_long("truncateOffset", -1)):
                    return
            elif self.acting != MASTER:
                await self._take_up(epoch, answer.get_long("epochStartOffset", self.store.max_phy_offset))
            self._last_ok_sent = sent
            if self._fenced:
                self._fenced = False
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

    async def _promote(self, epoch: int, truncate: int) -> bool:
        """Become master of ``epoch``: stop copying, cut what the group does not share (only an
        unclean choice from an older epoch has any), report where the CommitLog ends, record it."""
        if self.acting == MASTER and self.epoch == epoch:
            return True
        await self.replication.stop_slave()
        await self._truncate(truncate, epoch)
        start = self.store.max_phy_offset
        request = RemotingCommand.request(CONTROLLER_PROMOTED, {
            "brokerName": self.config.broker_name, "brokerId": self.identity, "epoch": epoch, "startOffset": start})
        try:
            answer = await self.client.invoke(self.config.controller_addr, request, 5.0)
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
        await self._become_master(epoch)
        return True

    async def _take_up(self, epoch: int, start: int) -> None:
        """The controller names this broker master of ``epoch`` (at first start, or after a restart)."""
        if self.epochs.last_epoch < epoch:
            await asyncio.to_thread(self.epochs.append, epoch, start)
        log.info("master of %s, epoch %d", self.config.broker_name, epoch)
        await self._become_master(epoch)

    async def _become_master(self, epoch: int) -> None:
        await self.replication.lead()
        self.acting, self.epoch = MASTER, epoch
        if self.on_lead is not None:
            self.on_lead()
        if self.on_role_change is not None:
            self.on_role_change()

    async def _follow(self, answer: RemotingCommand, epoch: int) -> None:
        truncate = answer.get_long("truncateOffset", -1)
        if 0 <= truncate < self.store.max_phy_offset:
            await self.replication.stop_slave()
            await self._truncate(truncate, epoch)
        if self.epochs.last_epoch < epoch:
            await asyncio.to_thread(self.epochs.append, epoch, answer.get_long("epochStartOffset", 0))
        master_ha, master_addr = answer.get_str("masterHaAddr", ""), answer.get_str("masterAddr", "")
        changed = self.acting != SLAVE or self.epoch != epoch
        # A slave registers under its own id; broker 0 following another broker takes that
        # broker's id, free in the route while its owner registers as master (brokerId 0).
        slave_id = self.identity or answer.get_long("masterId", -1)
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
        """How long a master goes on taking sends after the last heartbeat the controller answered
        was sent: less than the failover timeout by one heartbeat interval, so it has stopped
        before the controller (which counts from when it received that heartbeat) may elect."""
        timeout = self.failover_timeout_ms / 1000
        return max(timeout - self.interval_s, timeout / 2)

    async def _watch_lease(self) -> None:
        """Fence the master the moment its lease runs out (not at the next heartbeat round, which
        may be held up by a controller that does not answer)."""
        while True:
            if self.acting == MASTER and not self._fenced and self.failover_timeout_ms:
                left = self._last_ok_sent + self._lease_s() - time.monotonic()
                if left <= 0:
                    self._fenced = True
                    self.replication.fence(FENCED_REFUSAL)
                    log.error("no answer from the controller for %.1f s: taking no sends until it answers",
                              self._lease_s())
                    continue
                await asyncio.sleep(min(left, self.interval_s))
            else:
                await asyncio.sleep(self.interval_s)
