"""Fixtures shared by every test layer."""

from __future__ import annotations

import pytest

from testkit.processes import StandaloneProcess

from tests.support import InProcessCluster


@pytest.fixture
async def cluster(tmp_path):
    """A name server + broker on this test's event loop, on free ports, data in tmp_path."""
    c = InProcessCluster(tmp_path / "store")
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
def standalone_process(tmp_path, request):
    """``ferrymq standalone`` as a subprocess; its log is printed if the test fails."""
    started: list[StandaloneProcess] = []

    def start(data_dir=None, settings=(), **kw) -> StandaloneProcess:
        p = StandaloneProcess(data_dir or tmp_path / "store", list(settings), **kw).start()
        started.append(p)
        return p

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for p in started:
        p.stop()
        if failed:
            print(f"--- standalone log ({p.log_path}) ---\n{p.log()}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
