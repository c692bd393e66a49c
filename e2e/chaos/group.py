"""One replicated broker group as local processes, for fault injection: a name server, a
``ferrymq controller`` and two brokers in controller mode on 127.0.0.1 (free ports, data under
one work directory), built on the failover tests' :class:`~testkit.failover.FailoverPair`.

The processes are named ``namesrv``, ``controller``, ``master`` (brokerId 0) and ``slave``
(brokerId 1); after a failover the broker names only say which process is which:
:meth:`LocalGroup.acting` says which one acts as master now. :meth:`LocalGroup.unhealthy` is
the suite's healing condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from testkit.failover import FailoverPair, controller_state, create_topic  # noqa: F401 (create_topic re-exported)

BROKERS = ("master", "slave")
BROKER_IDS = {"master": 0, "slave": 1}
FRESH_MS = 2000  # a heartbeat older than this is not a live member


class LocalGroup:
    def __init__(self, work: Path, role: str = "SYNC_MASTER", failover_timeout_ms: int = 3000,
                 settings: tuple[str, ...] = ("syncFlushTimeout=2000",)) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.pair = FailoverPair(work, role, list(settings), failover_timeout=failover_timeout_ms)
        self.frozen: set[str] = set()

    @property
    def namesrv(self) -> str:
        return self.pair.namesrv

    def start(self, topic: str) -> None:
        p = self.pair
        p.start_namesrv()
        p.start_controller()
        p.start_master()
        p.start_slave()
        asyncio.run(create_topic(p.namesrv, topic))

    # ---- the controller's view

    def state(self) -> dict:
        """CONTROLLER_GET_STATE for the group (raises when the controller does not answer)."""
        return asyncio.run(controller_state(self.pair.controller))

    def acting(self, role: str) -> str:
        """The process acting as ``role`` ("master" or "slave") by the controller's state; when
        the controller does not answer, the brokers' names."""
        try:
            master_id = self.state().get("masterId")
        except Exception:  # noqa: BLE001 - the controller down: fall back on the names
            master_id = None
        master = "slave" if master_id == 1 else "master"
        return master if role == "master" else next(n for n in BROKERS if n != master)

    def unhealthy(self) -> str | None:
        """Why the group is not healed yet (None: it is): every process running and not frozen,
        a master elected and heard, the other broker following its epoch and in the in-sync set."""
        down = [n for n, proc in self.pair.processes.items() if not self.running(n)]
        if down or self.frozen:
            return f"not running: {', '.join(down + sorted(self.frozen))}"
        try:
            st = self.state()
        except Exception as e:  # noqa: BLE001 - not back yet
            return f"controller not answering ({type(e).__name__})"
        epoch, master_id = st.get("epoch"), st.get("masterId")
        if master_id is None or st.get("pending"):
            return f"no master yet (epoch {epoch}, pending {st.get('pending')})"
        seen = {b["brokerId"]: b for b in st.get("brokers", [])}
        for broker_id, want in ((master_id, "MASTER"), (1 - master_id, "SLAVE")):
            b = seen.get(broker_id)
            if b is None or b["silentMs"] > FRESH_MS:
                return f"broker {broker_id} not heard"
            if b["acting"] != want or b["epoch"] != epoch:
                return f"broker {broker_id} acting {b['acting']} in epoch {b['epoch']} (want {want}, {epoch})"
        if 1 - master_id not in st.get("inSync", []):
            return f"broker {1 - master_id} not in the in-sync set {st.get('inSync')}"
        return None

    # ---- processes

    def running(self, name: str) -> bool:
        proc = self.pair.processes.get(name)
        return proc is not None and proc.proc is not None and proc.proc.poll() is None

    def exit_code(self, name: str) -> int | None:
        proc = self.pair.processes.get(name)
        return None if proc is None or proc.proc is None else proc.proc.poll()

    def pid(self, name: str) -> int:
        return self.pair.processes[name].proc.pid

    def kill(self, name: str) -> None:
        """kill -9."""
        self.pair.processes[name].kill()
        self.frozen.discard(name)

    def freeze(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGSTOP)
        self.frozen.add(name)

    def thaw(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(name), signal.SIGCONT)
        self.frozen.discard(name)

    def restart(self, name: str) -> None:
        """Start ``name`` again on its port and data directory (it must not be running)."""
        start = {"namesrv": self.pair.start_namesrv, "controller": self.pair.start_controller,
                 "master": self.pair.start_master, "slave": self.pair.start_slave}[name]
        start()

    def logs(self, name: str) -> Path:
        return self.pair.processes[name].log_path

    def stop(self) -> None:
        for name in list(self.frozen):
            self.thaw(name)
        self.pair.stop_all()
