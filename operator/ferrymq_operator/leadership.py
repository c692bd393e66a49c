"""Leader election among the operator's replicas (the chart runs two): only the holder of the
Lease ``FERRYMQ_LEASE_NAME`` in the operator's namespace runs kopf's handlers.

kopf's own peering pauses lower-priority peers but is no lock, so the election is FerryMQ's
``LeaseElector`` (ferrymq.kube, client-go's algorithm, 15/10/2 s by default). A kopf startup
handler (handlers.py) waits here until this replica leads: kopf starts no watcher, timer or
handler before its startup handlers finish, so a standby only answers its liveness probe.
Losing the Lease (a renewal not done within the renew deadline, or another holder seen) ends
the process at once, mid-handler if need be: no graceful drain, so it never acts after a
standby may have taken over; the pod restarts as a standby. A clean shutdown (SIGTERM, kopf's
cleanup) releases the Lease, so a standby takes over at its next retry.

Settings (the chart sets them from values.yaml ``leaderElection``):

FERRYMQ_LEADER_ELECTION             "true": elect a leader (default off: one replica, as before)
FERRYMQ_LEASE_NAME                  the Lease (default ferrymq-operator)
POD_NAMESPACE                       where the Lease lives (default: the service account's namespace)
POD_NAME                            this replica's identity in the Lease (default: host name and pid)
FERRYMQ_LEASE_DURATION_SECONDS      15: a standby takes over this long after the last renewal it saw
FERRYMQ_LEASE_RENEW_DEADLINE_SECONDS  10: a leader that could not renew for this long exits
FERRYMQ_LEASE_RETRY_PERIOD_SECONDS  2: renewals and a standby's attempts, this often
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from ferrymq.kube import KubeClient, KubeConfig, LeaseElector
from ferrymq.kube.election import validate_timings

log = logging.getLogger("ferrymq.operator")

EXIT_LEADERSHIP_LOST = 3
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class LeaderElectionSettings:
    namespace: str
    lease_name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "LeaderElectionSettings | None":
        """None when leader election is off."""
        env = os.environ if env is None else env
        if env.get("FERRYMQ_LEADER_ELECTION", "").strip().lower() != "true":
            return None
        namespace = env.get("POD_NAMESPACE", "").strip()
        if not namespace and _NAMESPACE_FILE.is_file():
            namespace = _NAMESPACE_FILE.read_text().strip()
        if not namespace:
            raise ValueError("FERRYMQ_LEADER_ELECTION=true needs POD_NAMESPACE (the Lease's namespace)")
        settings = cls(namespace=namespace,
                       lease_name=env.get("FERRYMQ_LEASE_NAME", "").strip() or "ferrymq-operator",
                       identity=env.get("POD_NAME", "").strip() or f"{socket.gethostname()}-{os.getpid()}",
                       lease_duration=float(env.get("FERRYMQ_LEASE_DURATION_SECONDS", 15)),
                       renew_deadline=float(env.get("FERRYMQ_LEASE_RENEW_DEADLINE_SECONDS", 10)),
                       retry_period=float(env.get("FERRYMQ_LEASE_RETRY_PERIOD_SECONDS", 2)))
        validate_timings(settings.lease_duration, settings.renew_deadline, settings.retry_period)
        return settings


async def _serve_health(port: int):
    from aiohttp import web

    async def healthz(_request):
        return web.json_response({"standby": True})
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


def _exit_now(code: int) -> None:  # pragma: no cover - replaced in tests
    os._exit(code)


class Leadership:
    """Campaign for the Lease in the background; ``acquired()`` returns once this replica leads.
    ``exit``: what ends the process when leadership is lost (os._exit: no cleanup handler, no
    pending write of any handler runs after it)."""

    def __init__(self, settings: LeaderElectionSettings, client: KubeClient | None = None,
                 exit: Callable[[int], None] = _exit_now) -> None:
        self.settings = settings
        self._client = client
        self._exit = exit
        self._task: asyncio.Task | None = None
        self._stopping = False
        self.elector: LeaseElector | None = None

    async def acquired(self, health_port: int | None = None) -> None:
        """Return once this replica leads. ``health_port``: answer /healthz there meanwhile
        (kopf serves its own liveness endpoint only once its startup handlers are done; a
        standby must not fail its liveness probe). Closed before returning, for kopf's."""
        health = await _serve_health(health_port) if health_port else None
        try:
            await self._campaign()
        finally:
            if health is not None:
                await health.cleanup()

    async def _campaign(self) -> None:
        s = self.settings
        if self._client is None:
            self._client = KubeClient(KubeConfig.load(), timeout=min(s.renew_deadline, 5.0))
        self.elector = LeaseElector(self._client, s.namespace, s.lease_name, s.identity,
                                    lease_duration=s.lease_duration, renew_deadline=s.renew_deadline,
                                    retry_period=s.retry_period, on_stopped_leading=self._lost)
        log.info("leader election: %s waits for the Lease %s/%s", s.identity, s.namespace, s.lease_name)
        self._task = asyncio.create_task(self.elector.run(), name="operator leader election")
        leading = asyncio.create_task(self.elector.leading.wait())
        done, _ = await asyncio.wait({leading, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if leading not in done:
            leading.cancel()
            self._task.result()  # the election ended without leading: its error
            raise RuntimeError("leader election ended")
        log.info("leader election: %s leads (Lease %s/%s): reconciling", s.identity, s.namespace, s.lease_name)

    def check(self) -> None:
        """Exit now if this replica no longer leads although it has not noticed yet: called
        before every reconcile and every write to the API server, so a leader whose deadline
        passed while it was frozen or starved (its renewal loop not run yet) acts no more."""
        elector = self.elector
        if elector is not None and not self._stopping and not elector.is_leader:
            self._lost()

    def _lost(self) -> None:
        if self._stopping:
            return  # released on shutdown: kopf has stopped acting already
        log.error("leader election: %s lost the Lease %s/%s: exiting now (the pod restarts as a standby)",
                  self.settings.identity, self.settings.namespace, self.settings.lease_name)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        self._exit(EXIT_LEADERSHIP_LOST)

    async def release(self) -> None:
        """On a clean shutdown: give the Lease up so a standby need not wait for it to lapse."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
        if self._client is not None:
            await self._client.close()
