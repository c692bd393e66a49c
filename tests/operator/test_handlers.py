"""The handlers' common path: a reconcile sees the resource as it was when it started, even
when kopf updates a timer's (live) body while it runs."""

import asyncio
import logging

import kopf

from ferrymq_operator import handlers


async def test_a_reconcile_works_on_the_generation_it_started_with():
    live = {"metadata": {"name": "demo", "generation": 1}, "spec": {"replicas": 1}, "status": {}}
    memo = kopf.Memo()
    memo.settings = object()
    seen = []
    started = asyncio.Event()
    release = asyncio.Event()

    async def reconcile(body, patch, settings):
        started.set()
        await release.wait()  # meanwhile the user changes the spec: kopf updates the live body
        seen.append((body["metadata"]["generation"], body["spec"]["replicas"]))

    run = asyncio.ensure_future(handlers.reconcile_snapshot(reconcile, live, kopf.Patch(), memo))
    await started.wait()
    live["metadata"]["generation"] = 2
    live["spec"]["replicas"] = 3
    release.set()
    await run
    assert seen == [(1, 1)]  # status will name generation 1 as observed/applied, not 2


def _record(message: str, name: str = "kopf.objects.quiet-test") -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None)


def test_a_resync_that_succeeds_logs_at_debug_only(caplog):
    quiet = handlers.QuietResyncs()
    logger = logging.getLogger("kopf.objects.quiet-test")
    logger.setLevel(logging.INFO)
    resync = _record("Timer 'consumergroups-resync' succeeded.")
    assert not quiet.filter(resync) and resync.levelno == logging.DEBUG, "dropped at INFO"
    logger.setLevel(logging.DEBUG)
    assert quiet.filter(_record("Timer 'brokers-resync' succeeded.")), "shown with --verbose"
    changed = _record("Handler 'consumergroups-changed' succeeded.")
    failed = _record("Timer 'consumergroups-resync' failed with an exception and will try again in 1 seconds: x")
    logger.setLevel(logging.INFO)
    assert quiet.filter(changed) and changed.levelno == logging.INFO and quiet.filter(failed)
    handlers.quiet_resync_logs(logger)
    handlers.quiet_resync_logs(logger)
    assert sum(isinstance(f, handlers.QuietResyncs) for f in logger.filters) == 1


def test_status_logs_condition_transitions_only(caplog, monkeypatch):
    from ferrymq_operator import status
    from ferrymq_operator.conditions import Condition

    monkeypatch.setattr(kopf, "event", lambda *a, **kw: None)
    body = {"kind": "ConsumerGroup", "metadata": {"name": "g", "namespace": "prod", "generation": 1}, "status": {}}
    with caplog.at_level(logging.INFO, logger="ferrymq.operator"):
        patch = kopf.Patch()
        status.finish(body, patch, [Condition("Ready", True, "Applied")], {})
        body["status"] = {"conditions": patch["status"]["conditions"]}
        status.finish(body, kopf.Patch(), [Condition("Ready", True, "Applied", "again")], {})
    assert [r.getMessage() for r in caplog.records] == ["ConsumerGroup prod/g: Ready True (Applied)"]


def test_resync_lines_stay_at_info_when_asked():
    from ferrymq_operator.settings import OperatorSettings

    assert OperatorSettings.from_env({"FERRYMQ_LOG_RESYNCS": "True"}).log_resyncs
    assert not OperatorSettings.from_env({}).log_resyncs
