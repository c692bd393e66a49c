"""The FerryMQ controller (failover, issue 13): the one place that decides which broker of a
group is master. Brokers with ``enableControllerMode`` heartbeat it; when a master is silent
for ``failoverTimeout`` it elects a slave that holds everything the master acknowledged,
bumps the group's epoch, and records where the new epoch starts once the new master reports
it. Its state (each group's epoch history) is written with fsync before any broker hears of a
change, so a restarted controller keeps the epochs. Run exactly one (``ferrymq controller``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ferrymq.common.controller_protocol import (
    CONTROLLER_GET_STATE,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_PROMOTED,
    NONE,
    WAIT,
)
from ferrymq.controller.metrics import controller_registry
from ferrymq.controller.state import (
    ACTING,
    BrokerSeen,
    EpochRecord,
    Group,
    Pending,
    elect,
    first_master,
    heartbeat_answer,
)
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ServerTls

log = logging.getLogger(__name__)

STATE_FILE = "controller.json"


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

    def __post_init__(self) -> None:
        if self.failover_timeout < 1000:
            raise ValueError(f"failoverTimeout must be at least 1000 ms, got {self.failover_timeout}")
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"controller port must be 0..65535, got {self.listen_port}")


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        tls = ServerTls.build(config.tls_mode, config.tls_server_cert_path, config.tls_server_key_path)
        self.server = RemotingServer(config.listen_host, config.listen_port, name="controller", tls=tls)
        self.server.register(CONTROLLER_HEARTBEAT, self.heartbeat)
        self.server.register(CONTROLLER_PROMOTED, self.promoted)
        self.server.register(CONTROLLER_GET_STATE, self.get_state)
        self._path = Path(config.data_dir) / STATE_FILE
        self._lock = asyncio.Lock()  # one state change (and its fsync) at a time
        self._scan: asyncio.Task | None = None
        self._saved = ""
        self.started = time.monotonic()
        self.serving = False
        self.metrics_registry = controller_registry(lambda: self.groups)

    @property
    def address(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    @property
    def timeout_s(self) -> float:
        return self.config.failover_timeout / 1000

    async def start(self) -> None:
        await asyncio.to_thread(self._load)
        self.started = time.monotonic()
        await self.server.start()
        self.serving = True
        self._scan = asyncio.create_task(self._scan_loop(), name="controller-elections")
        log.info("controller listening on %s (failoverTimeout %d ms, %d broker group(s) from %s)", self.address,
                 self.config.failover_timeout, len(self.groups), self._path)

    async def stop(self) -> None:
        self.serving = False
        if self._scan is not None:
            self._scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan
        await self.server.stop()
        async with self._lock:
            await self._save()

    def readiness(self) -> tuple[bool, str]:
        return (True, "") if self.serving else (False, "controller not serving")

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        try:
            raw = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        except ValueError as exc:
            raise ValueError(f"controller state {self._path} is not JSON ({exc}); refusing to start without "
                             f"its epochs") from None
        self.groups = {name: Group.from_dict(name, g) for name, g in (raw.get("groups") or {}).items()}
        self._saved = self._render()

    def _render(self) -> str:
        return json.dumps({"groups": {n: g.to_dict() for n, g in sorted(self.groups.items()) if g.history}},
                          indent=1, sort_keys=True)

    async def _save(self) -> None:
        """Write the state if it changed: temporary file, fsync, rename, fsync the directory.
        Callers hold ``_lock``; nobody is told of a change before this returns."""
        data = self._render()
        if data != self._saved:
            await asyncio.to_thread(_write_durably, self._path, data)
            self._saved = data

    # ------------------------------------------------------------------ requests

    async def heartbeat(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = req.get_str("brokerName", required=True)
        acting = req.get_str("acting", NONE)
        if acting not in ACTING:
            return req.response(ResponseCode.SYSTEM_ERROR, remark=f"acting must be one of {', '.join(ACTING)}")
        seen = BrokerSeen(req.get_long("brokerId", required=True), req.get_str("brokerAddr", required=True),
                          req.get_str("haServerAddr", ""), req.get_long("epoch", 0), req.get_long("maxOffset", 0),
                          req.get_long("confirmedOffset", 0), acting, time.monotonic())
        async with self._lock:
            group = self.groups.get(name)
            if group is None:
                group = self.groups[name] = Group(req.get_str("clusterName", ""), name)
            group.brokers[seen.broker_id] = seen
            if not group.history and group.pending is None:
                if seen.broker_id != 0:
                    return self._answer(req, WAIT, 0)
                record = first_master(seen)
                group.history.append(record)
                group.must_reach = record.start_offset
                await self._save()
                log.info("broker group %s: broker 0 (%s) is master of epoch %d from offset %d", name, seen.addr,
                         record.epoch, record.start_offset)
            answer = heartbeat_answer(group, seen)
        return req.response(ext_fields={
            "role": answer.role, "epoch": answer.epoch, "epochStartOffset": answer.epoch_start_offset,
            "masterId": answer.master_id, "masterAddr": answer.master_addr, "masterHaAddr": answer.master_ha_addr,
            "truncateOffset": answer.truncate_offset, "promote": answer.promote,
            "failoverTimeout": self.config.failover_timeout})

    def _answer(self, req: RemotingCommand, role: str, epoch: int) -> RemotingCommand:
        return req.response(ext_fields={"role": role, "epoch": epoch, "epochStartOffset": -1, "masterId": -1,
                                        "masterAddr": "", "masterHaAddr": "", "truncateOffset": -1,
                                        "promote": False, "failoverTimeout": self.config.failover_timeout})

    async def promoted(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = req.get_str("brokerName", required=True)
        broker_id, epoch = req.get_long("brokerId", required=True), req.get_long("epoch", required=True)
        start = req.get_long("startOffset", required=True)
        async with self._lock:
            group = self.groups.get(name)
            cur = group.current if group else None
            if cur is not None and (cur.epoch, cur.master_id, cur.start_offset) == (epoch, broker_id, start):
                return req.response()  # a retry of a promotion already recorded
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
            group.history.append(EpochRecord(epoch, start, broker_id))
            group.pending = None
            group.must_reach = start
            await self._save()
        log.warning("broker group %s: broker %d is master of epoch %d from CommitLog offset %d", name, broker_id,
                    epoch, start)
        return req.response()

    async def get_state(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
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
                await self._save()  # mustReach moved by the masters' reports

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
                    log.error("broker group %s: master %d silent for %.0f s and no slave holds offset %d (what it "
                              "acknowledged); no failover", group.name, cur.master_id, now - silent_since,
                              group.must_reach)
                    group.no_candidate_logged = True
                continue
            group.pending = Pending(chosen.broker_id, cur.epoch + 1, now)
            log.warning("broker group %s: master %d silent for %.1f s; promoting broker %d (%s, offset %d, the "
                        "master acknowledged up to %d) to epoch %d", group.name, cur.master_id, now - silent_since,
                        chosen.broker_id, chosen.addr, chosen.max_offset, group.must_reach, cur.epoch + 1)


def _write_durably(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

