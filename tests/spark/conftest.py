"""Fixtures for the Spark layer: one local SparkSession (local[2]) for the whole session,
and FerryMQ brokers as real processes on 127.0.0.1 (Spark's calls block, so the broker must
not live on the test's event loop)."""

from __future__ import annotations

import pytest

from testkit.processes import StandaloneProcess

from tests.support import missing_prerequisite

try:
    import pyspark  # noqa: F401
except ImportError:
    missing_prerequisite("spark: pyspark is not installed (pip install -e '.[spark]')")


@pytest.fixture(scope="session")
def spark():
    from testkit.spark import make_spark_session
    try:
        session = make_spark_session()
    except RuntimeError as e:
        missing_prerequisite(f"spark: {e}")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory, request):
    """A ``ferrymq standalone`` process shared by a module's tests (each uses its own topics)."""
    data = tmp_path_factory.mktemp("spark-broker")
    process = StandaloneProcess(data / "store").start()
    yield process
    process.stop()
    if request.session.testsfailed:
        print(f"--- standalone log ({process.log_path}) ---\n{process.log()[-20000:]}")
