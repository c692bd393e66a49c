"""How ``make test`` spreads test modules over its parallel processes (pytest-xdist, ``--dist
loadgroup``).

* Every module is one unit of work (its module-scoped brokers and JVMs start once), except that
  all of ``tests/spark/`` is one unit: each process that runs a Spark test starts a Spark session
  of its own (20-35 s of JVM start-up on this machine), so they all go to one.
* Units start longest first (the longest-processing-time rule): xdist hands units out in
  collection order, and a long module collected late ran on after the others had finished (the
  suite's wall time was that tail). The lengths come from ``tests/module_durations.json``, which
  ``make test-durations`` rewrites from a run of the suite; a module it does not know counts as
  the median.

Without xdist (or with another ``--dist``) the marks are inert and only the order changes.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("module_durations.json")
# Directories whose modules share one process (a costly session-wide fixture).
SHARED_UNITS = {"tests/spark/": "spark"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-module-durations", metavar="PATH", default=None,
                     help="write each test module's total time (setup, call, teardown) to PATH as JSON")


def unit_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return next((unit for prefix, unit in SHARED_UNITS.items() if module.startswith(prefix)), module)


def _known_durations() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    known = _known_durations()
    modules = {item.nodeid.split("::", 1)[0] for item in items}
    default = statistics.median(known.values()) if known else 0.0
    cost: dict[str, float] = defaultdict(float)
    for module in modules:
        cost[unit_of(module)] += known.get(module, default)
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = unit_of(item.nodeid)
        first_seen.setdefault(unit, index)
        item.add_marker(pytest.mark.xdist_group(unit))
    # stable: within a unit the collection order stays
    items.sort(key=lambda item: (-cost[unit_of(item.nodeid)], first_seen[unit_of(item.nodeid)]))


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self) -> None:
        self.path.write_text(json.dumps({k: round(v, 1) for k, v in sorted(self.seconds.items())}, indent=1) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-module-durations")
    # xdist workers report to the controller, which records for all of them
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(Path(path)), "module-durations-recorder")
