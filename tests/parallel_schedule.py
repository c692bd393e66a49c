"""How ``make test`` spreads test modules over its parallel processes (pytest-xdist, ``--dist
loadfile``, with the scheduler below in place of xdist's own).

* Every module is one unit of work (its module-scoped brokers and JVMs start once), except that
  all of ``tests/spark/`` is one unit: each process that runs a Spark test starts a Spark session
  of its own (20-50 s of JVM start-up on this machine), so they all go to one.
* Units start longest first (the longest-processing-time rule) rather than in xdist's order (the
  units with the most tests first, whatever they cost). The lengths come from
  ``tests/module_durations.json``, which ``make test-durations`` rewrites from a run of the suite; a
  module it does not know counts as the median.

Not ``--dist loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 groups by a suffix it writes
into ``item._nodeid``, which pytest 9.2 no longer reads (``Node.nodeid`` comes from ``_id``), so
every test became a unit of its own and module fixtures started once per process that ran one of
their tests (an Apache broker three times; measured on 2026-11-29).

Without xdist only the order changes.
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


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    module = module_of(nodeid)
    return next((unit for prefix, unit in SHARED_UNITS.items() if module.startswith(prefix)), module)


def _known_durations() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(tryfirst=True)  # before pytest's own reordering by fixture, which keeps this order otherwise
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    known = _known_durations()
    default = statistics.median(known.values()) if known else 0.0
    units = {module: unit_of(module) for module in {module_of(item.nodeid) for item in items}}
    cost: dict[str, float] = defaultdict(float)
    for module, unit in units.items():
        cost[unit] += known.get(module, default)
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(units[module_of(item.nodeid)], index)

    def longest_first(item: pytest.Item) -> tuple[float, int]:
        unit = units[module_of(item.nodeid)]
        return -cost[unit], first_seen[unit]  # a unit's own items keep their collection order
    items.sort(key=longest_first)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """For ``--dist loadfile``: units as above, handed out in collection order (longest first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep the longest-first order collection gave
    return ModuleUnits(config, log)


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        self.path.write_text(json.dumps({k: round(v, 1) for k, v in sorted(self.seconds.items())}, indent=1) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-module-durations")
    # xdist workers report to the controller, which records for all of them
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(Path(path)), "module-durations-recorder")
