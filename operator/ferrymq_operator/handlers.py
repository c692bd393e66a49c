"""kopf handlers: the only place that knows kopf's decorators. Each resource has one
reconcile function (reconcile_broker.py, reconcile_topic.py, reconcile_group.py), called by
its create/update/resume handlers and by a resync timer, serialised per object by a lock in
kopf's per-object memo (reconcile_user.py for Users). Reconciles never raise for broker-side trouble: they record it as a
condition and the next timer tick tries again (kopf's own retry would hide the reason from
``kubectl get``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import re
from typing import Awaitable, Callable

import kopf

from ferrymq_operator import kube
from ferrymq_operator.constants import FINALIZER, GROUP, VERSION
from ferrymq_operator.leadership import LeaderElectionSettings, Leadership
from ferrymq_operator.reconcile_broker import reconcile_broker
from ferrymq_operator.reconcile_group import delete_group, reconcile_group
from ferrymq_operator.reconcile_topic import delete_topic, reconcile_topic
from ferrymq_operator.reconcile_user import delete_user, reconcile_user
from ferrymq_operator.settings import OperatorSettings

log = logging.getLogger("ferrymq.operator")

# kopf needs the timers' intervals when this module is imported; everything else reads the
# settings the startup handler put in the memo.
_INTERVALS = OperatorSettings.from_env()

Reconcile = Callable[[object, kopf.Patch, OperatorSettings], Awaitable[None]]
Delete = Callable[[object, OperatorSettings], Awaitable[None]]


class QuietResyncs(logging.Filter):
    """kopf logs "Timer '<plural>-resync' succeeded." at INFO for every object on every resync
    (no kopf setting changes that level): such a line becomes DEBUG, shown only when kopf runs
    --verbose (or left at INFO with FERRYMQ_LOG_RESYNCS=true). What a reconcile changes is
    logged at INFO by the reconcile itself (objects created, deleted or restarted, groups
    pushed, condition transitions in status.finish); the create/update/resume handlers' lines
    and failures stay as they are."""

    RESYNC = re.compile(r"Timer '[a-z]+-resync' succeeded\.$")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not self.RESYNC.match(record.getMessage()):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_resync_logs(logger: logging.Logger | None = None) -> None:
    """Install QuietResyncs on kopf's per-object logger (once)."""
    logger = logger or logging.getLogger("kopf.objects")
    if not any(isinstance(f, QuietResyncs) for f in logger.filters):
        logger.addFilter(QuietResyncs())


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    memo.settings = OperatorSettings.from_env()  # per-object memos are copies of this one
    kube.load_config()
    settings.persistence.finalizer = FINALIZER
    # Progress and diff-base in our own annotations: the CRDs' status schemas are strict and
    # would prune kopf's default status.kopf bookkeeping.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    # Watches end server-side after watch_timeout and are re-established; the client-side
    # timeout catches a connection that died without a FIN.
    settings.watching.server_timeout = memo.settings.watch_timeout
    settings.watching.client_timeout = memo.settings.watch_timeout + 30
    settings.watching.connect_timeout = 30
    # A resource deleted while its resync timer is mid-reconcile waits for that reconcile to end;
    # kopf re-checks the exiting timer every cancellation_polling seconds (default 60: `kubectl
    # delete` of a ConsumerGroup then hung for a minute, seen in the k8s layer). A reconcile
    # takes seconds at most, so look again every second.
    settings.background.cancellation_polling = 1.0
    # Events only where we post them explicitly (transitions), not one per log line.
    settings.posting.level = logging.CRITICAL + 1
    if not memo.settings.log_resyncs:
        quiet_resync_logs()


@kopf.on.startup()
async def lead(memo: kopf.Memo, **_) -> None:
    """With several replicas (FERRYMQ_LEADER_ELECTION=true): wait until this one holds the
    Lease. kopf starts no watcher or timer before its startup handlers are done, so a standby
    does nothing else; leadership lost ends the process (leadership.py)."""
    election = LeaderElectionSettings.from_env()
    if election is not None:
        memo.leadership = Leadership(election)
        port = os.environ.get("FERRYMQ_LIVENESS_PORT", "").strip()
        await memo.leadership.acquired(int(port) if port else None)
        kube.write_guard = memo.leadership.check


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_) -> None:
    kube.close()
    if memo.get("leadership") is not None:
        await memo.leadership.release()


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    if "lock" not in memo:
        memo["lock"] = asyncio.Lock()
    return memo["lock"]


def _still_leading(memo: kopf.Memo) -> None:
    if memo.get("leadership") is not None:
        memo.leadership.check()


async def reconcile_snapshot(reconcile: Reconcile, body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    async with _lock(memo):
        _still_leading(memo)
        # A timer's body is live (kopf updates it as events arrive): a resync that ran while the
        # spec changed then wrote the new generation as observed and applied although it applied
        # the old spec (found by the k8s layer: InvalidConfig with appliedGeneration == generation).
        # Reconcile a snapshot taken once the lock is held.
        await reconcile(copy.deepcopy(dict(body)), patch, memo.settings)


def _register(plural: str, reconcile: Reconcile, interval: float, initial_delay: float,
              delete: Delete | None = None) -> None:
    """create/update/resume handlers and a resync timer for ``plural`` (and a delete handler)."""
    async def changed(body, patch, memo, **_) -> None:
        await reconcile_snapshot(reconcile, body, patch, memo)

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(GROUP, VERSION, plural, id=f"{plural}-changed")(changed)
    kopf.timer(GROUP, VERSION, plural, interval=interval, initial_delay=initial_delay,
               id=f"{plural}-resync")(changed)
    if delete is not None:
        async def deleted(body, memo, **_) -> None:
            async with _lock(memo):
                _still_leading(memo)
                await delete(body, memo.settings)

        kopf.on.delete(GROUP, VERSION, plural, id=f"{plural}-deleted")(deleted)


_register("brokers", reconcile_broker, _INTERVALS.broker_resync_seconds, 1.0)
_register("topics", reconcile_topic, _INTERVALS.resync_seconds, _INTERVALS.resync_seconds, delete_topic)
_register("consumergroups", reconcile_group, _INTERVALS.resync_seconds, _INTERVALS.resync_seconds, delete_group)
_register("users", reconcile_user, _INTERVALS.resync_seconds, 1.0, delete_user)
