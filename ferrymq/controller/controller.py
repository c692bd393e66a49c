"""The FerryMQ controller (failover, issue 13): the one place that decides which broker of a
group is master. Brokers with ``enableControllerMode`` heartbeat it; when a master is silent
for ``failoverTimeout`` it elects a slave that holds everything the master acknowledged,
bumps the group's epoch, and records where the new epoch starts once the new master reports
it. Its state (each group's epoch history) is written with fsync before any broker hears of a
change, so a restarted controller keeps the epochs. With the file state (default) run exactly
one (``ferrymq controller``); with ``--state kubernetes`` run several: the state is a ConfigMap
changed by compare-and-swap and only the holder of a Lease answers brokers (docs/failover-kubernetes.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferrymq.common.controller_protocol import (
    CONTROLLER_ALTER_IN_SYNC,
    CONTROLLER_GET_STATE,
    CONTROLLER_HAND_OVER,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_NOT_LEADER,
    CONTROLLER_PROMOTED,
    WAIT,
)
from ferrymq.controller.metrics import controller_registry
from ferrymq.controller.state_store import FileStateStore, StateStore, StateStoreError
from ferrymq.controller.state import (
    ACTING,
    BrokerSeen,
    EpochRecord,
    Group,
    Pending,
    alter_in_sync,
    elect,
    first_master,
    hand_over,
    heartbeat_answer,
)
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    AlterInSyncHeader,
    ControllerHandOverHeader,
    ControllerHeartbeatHeader,
    ControllerHeartbeatResponseHeader,
    ControllerPromotedHeader,
    HandOverResponseHeader,
    InSyncEpochResponseHeader,
    NotLeaderResponseHeader,
)
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ServerTls

if TYPE_CHECKING:
    from ferrymq.kube.election import LeaseElector

log = logging.getLogger(__name__)

STATE_FILE = "controller.json"
# On the Lease (--state kubernetes): the leader's advertised address, which the other replicas
# name in their CONTROLLER_NOT_LEADER answers.
LEADER_ADDR_ANNOTATION = "ferrymq.io/controller-address"


@dataclass
class ControllerConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9878
    data_dir: str = ".controller"
    # A master silent this long (ms) is replaced by an in-sync slave; masters that cannot reach
    # the controller stop acknowledging sends shortly before (broker/ha/failover.py).
    failover_timeout: int = 10_000
    # Elect a slave short of what the master acknowledged when no other is left (loses those messages).
    enable_elect_unclean_master: bool = False
    # TLS on the port, as the name server's (brokers with useTLS speak TLS to it)
    tls_mode: str = "disabled"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_cert_reload_interval_seconds: float = 10.0  # renewed certificate files served without a restart; 0: off
    # host:port other replicas give brokers when this one leads (several replicas); default: the
    # bound address
    advertise_addr: str = ""

    def __post_init__(self) -> None:
        if self.failover_timeout < 1000:
            raise ValueError(f"failoverTimeout must be at least 1000 ms, got {self.failover_timeout}")
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"controller port must be 0..65535, got {self.listen_port}")


class Controller:
    def __init__(self, config: ControllerConfig, store: StateStore | None = None,
                 elector: "LeaseElector | None" = None) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        tls = ServerTls.build(config.tls_mode, config.tls_server_cert_path, config.tls_server_key_path,
                              reload_interval=config.tls_cert_reload_interval_seconds)
        self.server = RemotingServer(config.listen_host, config.listen_port, name="controller", tls=tls)
        self.server.register(CONTROLLER_HEARTBEAT, self.heartbeat)
        self.server.register(CONTROLLER_PROMOTED, self.promoted)
        self.server.register(CONTROLLER_GET_STATE, self.get_state)
        self.server.register(CONTROLLER_ALTER_IN_SYNC, self.alter_in_sync)
        self.server.register(CONTROLLER_HAND_OVER, self.hand_over)
        # Persistence (state_store.py) and leadership. Without an elector this is the only
        # controller and leads from start() on. With one (several replicas, the state in a
        # ConfigMap) it answers brokers only while it holds the Lease and has read the state
        # since it took it; everyone else gets CONTROLLER_NOT_LEADER (_refuse_unless_leading).
        self.store: StateStore = store or FileStateStore(Path(config.data_dir) / STATE_FILE)
        self.elector = elector
        self.leading = False
        self._term = 0  # counts leadership changes: a take-over that finishes after its term ended does nothing
        self._campaign: asyncio.Task | None = None
        self._taking_over: asyncio.Task | None = None
        self.server.set_request_guard(self._refuse_unless_leading)
        if elector is not None:
            elector.on_started_leading = self._on_started_leading
            elector.on_stopped_leading = self._on_stopped_leading
        self._lock = asyncio.Lock()  # one state change (and its fsync) at a time
        self._scan: asyncio.Task | None = None
        self._saved = ""
        self.started = time.monotonic()  # when it began leading: masters' silence counts from no earlier
        self.serving = False
        self.metrics_registry = controller_registry(lambda: self.groups)

    @property
    def address(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    @property
    def timeout_s(self) -> float:
        return self.config.failover_timeout / 1000

    @property
    def advertised_address(self) -> str:
        return self.config.advertise_addr or self.address

    async def start(self) -> None:
        if self.elector is None:
            await self._begin_leading(self._term)  # the only controller: read the state and lead
            await self.server.start()
        else:
            await self.server.start()  # answers CONTROLLER_NOT_LEADER until it leads
            self.elector.annotations[LEADER_ADDR_ANNOTATION] = self.advertised_address
            self._campaign = asyncio.create_task(self.elector.run(), name="controller-lease")
        self.serving = True
        log.info("controller listening on %s (failoverTimeout %d ms, state in %s%s)", self.address,
                 self.config.failover_timeout, self.store.description,
                 f", {len(self.groups)} broker group(s)" if self.elector is None else
                 f", leading while it holds Lease {self.elector.namespace}/{self.elector.name}")

    async def stop(self) -> None:
        self.serving = False
        if self._scan is not None:
            self._scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan
        await self.server.stop()
        async with self._lock:
            if self.leading:
                with contextlib.suppress(StateStoreError):  # logged; a replica behind a Lease only
                    await self._save()
        if self._campaign is not None:
            self._campaign.cancel()  # releases the Lease: a standby takes over at its next retry
            with contextlib.suppress(asyncio.CancelledError):
                await self._campaign
        if self._taking_over is not None:
            self._taking_over.cancel()

    def readiness(self) -> tuple[bool, str]:
        return (True, "") if self.serving else (False, "controller not serving")

    # ------------------------------------------------------------------ leadership

    def _refuse_unless_leading(self, req: RemotingCommand, peer_host: str) -> RemotingCommand | None:
        """Only the leader answers; any other replica (or the leader before it has read the
        state) answers every request with CONTROLLER_NOT_LEADER and the leader's address if it
        knows it (the Lease's annotation), so brokers go there."""
        if self.leading and (self.elector is None or self.elector.is_leader):
            return None
        leader = ""
        if self.elector is not None and self.elector.holder not in ("", self.elector.identity):
            leader = self.elector.holder_annotations.get(LEADER_ADDR_ANNOTATION, "")
        return req.response(CONTROLLER_NOT_LEADER, ext_fields=NotLeaderResponseHeader(leader_addr=leader).to_ext_fields(),
                            remark=f"controller {self.advertised_address} does not lead"
                                   + (f"; {leader} does" if leader else ""))

    def _on_started_leading(self) -> None:
        self._term += 1
        self._taking_over = asyncio.create_task(self._take_over(self._term), name="controller-take-over")

    def _on_stopped_leading(self) -> None:
        """At once, before anything else runs: refuse requests, stop electing, forget the state
        (another replica may change it from now on; it is read again on the next term)."""
        self._term += 1
        self.leading = False
        self.groups = {}
        self._saved = ""
        for task in (self._scan, self._taking_over):
            if task is not None:
                task.cancel()
        self._scan = self._taking_over = None
        log.warning("controller %s stopped leading: it answers no broker until it leads again", self.advertised_address)

    async def _take_over(self, term: int) -> None:
        try:
            await self._begin_leading(term)
        except (StateStoreError, ValueError) as exc:
            log.error("controller %s took the Lease but cannot read its state (%s); stepping down",
                      self.advertised_address, exc)
            if term == self._term and self.elector is not None:
                self.elector.step_down()

    async def _begin_leading(self, term: int) -> None:
        """Read the state afresh and start deciding. No master is replaced before it has been
        silent for a failover timeout counted from now: a new leader has not heard the brokers yet."""
        async with self._lock:
            if term != self._term:
                return
            self.groups, self._saved = {}, ""
            await self._load()
            self.started = time.monotonic()
            self.leading = True
            self._scan = asyncio.create_task(self._run_scan(), name="controller-elections")
        if self.elector is not None:
            log.warning("controller %s leads: %d broker group(s) from %s", self.advertised_address, len(self.groups),
                        self.store.description)

    async def _run_scan(self) -> None:
        try:
            await self._scan_loop()
        except StateStoreError:
            pass  # the state could not be written: _save logged it and this replica stepped down

    # ------------------------------------------------------------------ persistence

    async def _load(self) -> None:
        text = await self.store.load()
        if text is None:
            return
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"controller state {self.store.description} is not JSON ({exc}); refusing to start "
                             f"without its epochs") from None
        self.groups = {name: Group.from_dict(name, g) for name, g in (raw.get("groups") or {}).items()}
        self._saved = self._render()

    def _render(self) -> str:
        return json.dumps({"groups": {n: g.to_dict() for n, g in sorted(self.groups.items()) if g.history}},
                          indent=1, sort_keys=True)

    async def _save(self) -> None:
        """Write the state if it changed, durably (state_store.py). Callers hold ``_lock``;
        nobody is told of a change before this returns. A replica behind a Lease writes only
        while it leads; when a write fails or loses its compare-and-swap, its state may differ
        from the stored one: it steps down (dropping the state, read again on its next term)
        and the error goes to the caller. The single controller (file state) keeps leading: the
        caller undoes its change (``_save_or_undo``), so memory stays what the file holds."""
        data = self._render()
        if data == self._saved:
            return
        if self.elector is not None:
            if not self.leading:
                raise StateStoreError("this controller replica does not lead: nothing written")
            try:
                await self.store.save(data)
            except StateStoreError as exc:
                log.error("controller %s: state not written (%s); stepping down", self.advertised_address, exc)
                self.elector.step_down()
                raise
        else:
            try:
                await self.store.save(data)
            except StateStoreError as exc:
                log.error("controller %s: state not written (%s); the change is undone and the request refused",
                          self.advertised_address, exc)
                raise
        self._saved = data

    async def _save_or_undo(self, group: Group, before: tuple) -> str | None:
        """Write the change a request made to ``group`` (``before`` = ``group.decisions()`` as
        it was); when it cannot be written, put the group back and say why, for an error answer
        (the broker asks again at its next round). Callers hold ``_lock``."""
        try:
            await self._save()
        except StateStoreError as exc:
            group.undo(before)
            return f"controller state not written ({exc}): nothing changed, ask again"
        return None

    # ------------------------------------------------------------------ requests

    async def heartbeat(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = ControllerHeartbeatHeader.read(req)
        name, acting = header.broker_name, header.acting
        if acting not in ACTING:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"acting must be one of {', '.join(ACTING)}")
        seen = BrokerSeen(header.broker_id, header.broker_addr, header.ha_server_addr, header.epoch, header.max_offset,
                          header.confirmed_offset, acting, time.monotonic())
        async with self._lock:
            group = self.groups.get(name)
            if group is None:
                group = self.groups[name] = Group(header.cluster_name, name)
            group.brokers[seen.broker_id] = seen
            if not group.history and group.pending is None:
                if seen.broker_id != 0:
                    return self._answer(req, WAIT, 0)
                before = group.decisions()
                group.new_term(first_master(seen))
                record = group.current
                refusal = await self._save_or_undo(group, before)
                if refusal is not None:
                    return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
                log.info("broker group %s: broker 0 (%s) is master of epoch %d from offset %d", name, seen.addr,
                         record.epoch, record.start_offset)
            answer = heartbeat_answer(group, seen)
        return req.response(ext_fields=ControllerHeartbeatResponseHeader(
            role=answer.role, epoch=answer.epoch, epoch_start_offset=answer.epoch_start_offset,
            master_id=answer.master_id, master_addr=answer.master_addr, master_ha_addr=answer.master_ha_addr,
            truncate_offset=answer.truncate_offset, promote=answer.promote,
            in_sync=",".join(str(m) for m in sorted(answer.in_sync)), in_sync_epoch=answer.in_sync_epoch,
            unclean_election=self.config.enable_elect_unclean_master,
            failover_timeout=self.config.failover_timeout).to_ext_fields())

    def _answer(self, req: RemotingCommand, role: str, epoch: int) -> RemotingCommand:
        answer = ControllerHeartbeatResponseHeader(  # no in-sync set, no election mode: None leaves them out
            role=role, epoch=epoch, epoch_start_offset=-1, master_id=-1, master_addr="", master_ha_addr="",
            truncate_offset=-1, promote=False, in_sync=None, in_sync_epoch=None, unclean_election=None,
            failover_timeout=self.config.failover_timeout)
        return req.response(ext_fields=answer.to_ext_fields())

    async def promoted(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = ControllerPromotedHeader.read(req)
        name, broker_id, epoch, start = header.broker_name, header.broker_id, header.epoch, header.start_offset
        async with self._lock:
            group = self.groups.get(name)
            cur = group.current if group else None
            if cur is not None and (cur.epoch, cur.master_id, cur.start_offset) == (epoch, broker_id, start):
                return _in_sync_epoch_answer(req, group.in_sync_epoch)  # a retry, already recorded
            p = group.pending if group else None
            if p is None or (p.broker_id, p.epoch) != (broker_id, epoch):
                return req.response(ResponseCode.SYSTEM_ERROR,
                                    remark=f"no promotion of broker {broker_id} to epoch {epoch} is under way")
            if start < group.must_reach and not self.config.enable_elect_unclean_master:
                group.pending = None
                log.error("broker group %s: broker %d reports offset %d, short of %d the master acknowledged; "
                          "promotion called off", name, broker_id, start, group.must_reach)
                return req.response(ResponseCode.SYSTEM_ERROR, remark=f"offset {start} is short of "
                                    f"{group.must_reach}, what the old master acknowledged")
            before = group.decisions()
            group.new_term(EpochRecord(epoch, start, broker_id))
            refusal = await self._save_or_undo(group, before)
            if refusal is not None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
            in_sync_epoch = group.in_sync_epoch
        log.warning("broker group %s: broker %d is master of epoch %d from CommitLog offset %d", name, broker_id,
                    epoch, start)
        return _in_sync_epoch_answer(req, in_sync_epoch)

    async def alter_in_sync(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = AlterInSyncHeader.read(req)
        name, broker_id, epoch = header.broker_name, header.broker_id, header.epoch
        try:
            members = frozenset(int(m) for m in header.in_sync.split(",") if m.strip())
        except ValueError:
            return req.response(ResponseCode.SYSTEM_ERROR, remark="inSync must list broker ids separated by commas")
        async with self._lock:
            group = self.groups.get(name)
            if group is None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=f"no broker group {name}")
            before = sorted(group.in_sync)
            decided = group.decisions()
            refusal = alter_in_sync(group, broker_id, epoch, header.in_sync_epoch, members)
            if refusal is not None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
            # what the master acknowledged before it waited for the new members: a successor holds it
            group.must_reach = max(group.must_reach, header.confirmed_offset)
            refusal = await self._save_or_undo(group, decided)
            if refusal is not None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
            in_sync_epoch = group.in_sync_epoch
        log.warning("broker group %s: in-sync set %s with master %d (was %s), version %d", name, sorted(members),
                    broker_id, before, in_sync_epoch)
        return _in_sync_epoch_answer(req, in_sync_epoch)

    async def hand_over(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = ControllerHandOverHeader.read(req)
        name, broker_id = header.broker_name, header.broker_id
        async with self._lock:
            group = self.groups.get(name)
            if group is None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=f"no broker group {name}")
            before = group.decisions()
            chosen, refusal = hand_over(group, broker_id, header.epoch, header.confirmed_offset, time.monotonic(),
                                        self.timeout_s)
            if chosen is None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
            refusal = await self._save_or_undo(group, before)  # mustReach
            if refusal is not None:
                return req.response(ResponseCode.SYSTEM_ERROR, remark=refusal)
            epoch = group.pending.epoch
        log.warning("broker group %s: master %d hands over as it shuts down (its in-sync slaves hold offset %d); "
                    "promoting broker %d (%s) to epoch %d", name, broker_id, header.confirmed_offset,
                    chosen.broker_id, chosen.addr, epoch)
        return req.response(ext_fields=HandOverResponseHeader(successor_id=chosen.broker_id, epoch=epoch)
                            .to_ext_fields())

    async def get_state(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        # Under the lock: a change is shown only once _save made it durable, never while it is
        # being written (a controller killed then restarts without it).
        async with self._lock:
            now = time.monotonic()
            body = {"failoverTimeout": self.config.failover_timeout,
                    "groups": {n: g.status(now) for n, g in sorted(self.groups.items())}}
        return req.response(body=json.dumps(body).encode())

    # ------------------------------------------------------------------ elections

    async def _scan_loop(self) -> None:
        interval = min(0.5, self.timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            async with self._lock:
                self._scan_once(time.monotonic())
                try:
                    await self._save()  # mustReach moved by the masters' reports
                except StateStoreError:
                    if self.elector is not None:
                        raise  # stepped down
                    # the single controller keeps it (mustReach only rises) and writes it next round

    def _scan_once(self, now: float) -> None:
        timeout = self.timeout_s
        for group in self.groups.values():
            cur = group.current
            if cur is None:
                continue
            if group.pending is not None:
                if now - group.pending.since > timeout:
                    log.warning("broker group %s: broker %d did not take up epoch %d within %.0f s; electing again",
                                group.name, group.pending.broker_id, group.pending.epoch, timeout)
                    group.pending = None
                continue
            master = group.brokers.get(cur.master_id)
            silent_since = master.seen_at if master is not None else self.started
            if now - silent_since < timeout:
                group.no_candidate_logged = False
                continue
            chosen = elect(group, now, timeout, silent_since, self.config.enable_elect_unclean_master)
            if chosen is None:
                if not group.no_candidate_logged:
                    log.error("broker group %s: master %d silent for %.0f s and no in-sync slave heard from since "
                              "holds offset %d (what it acknowledged); no failover", group.name, cur.master_id,
                              now - silent_since, group.must_reach)
                    group.no_candidate_logged = True
                continue
            group.pending = Pending(chosen.broker_id, cur.epoch + 1, now)
            log.warning("broker group %s: master %d silent for %.1f s; promoting broker %d (%s, offset %d, the "
                        "master acknowledged up to %d) to epoch %d", group.name, cur.master_id, now - silent_since,
                        chosen.broker_id, chosen.addr, chosen.max_offset, group.must_reach, cur.epoch + 1)


def _in_sync_epoch_answer(req: RemotingCommand, in_sync_epoch: int) -> RemotingCommand:
    return req.response(ext_fields=InSyncEpochResponseHeader(in_sync_epoch=in_sync_epoch).to_ext_fields())
