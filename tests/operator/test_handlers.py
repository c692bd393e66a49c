"""The handlers' common path: a reconcile sees the resource as it was when it started, even
when kopf updates a timer's (live) body while it runs."""

import asyncio

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
