"""Batch reads through the JVM reader: ranges planned here, on the driver, read by a Spark
DataSource V2 in Java (``spark-jobs/jvm``, format ``ferrymq-jvm``) with no Python worker on the
executors. Same schema and values as the Python source (format ``ferrymq``).

    from ferrymq_spark.jvm_reader import read_batch
    df = read_batch(spark, {"namesrv": "127.0.0.1:9876", "subscribe": "Orders"})

``reader``: ``"auto"`` (default) takes the JVM reader when its jar is on the session's classpath
and the client config needs nothing it lacks (TLS), else the Python source, saying why in one
INFO line; ``"jvm"`` raises :class:`JvmReaderUnavailable` instead; ``"python"`` is the Python
source. The jar is in the Spark image's ``$SPARK_HOME/jars``; a local session adds
:func:`jar_path` to ``spark.jars`` (the tests' ``make_spark_session`` does).
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Mapping

from ferrymq.client.config import ClientConfig

from ferrymq_spark.blocking_client import BlockingConsumer
from ferrymq_spark.options import SourceOptions, parse_options
from ferrymq_spark.planning import BatchPlan, open_client, plan_with

log = logging.getLogger(__name__)

FORMAT = "ferrymq-jvm"
READERS = ("auto", "jvm", "python")
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "jvm" / "build.sh"


class JvmReaderUnavailable(RuntimeError):
    """reader="jvm" where the JVM reader cannot read: the message says why."""


def jar_path(build: bool = True) -> Path:
    """The JVM reader's jar for the current sources (a source checkout's ``spark-jobs/jvm``),
    built with ``build.sh`` when missing (``build=False``: JvmReaderUnavailable instead)."""
    if not BUILD_SCRIPT.exists():
        raise JvmReaderUnavailable(f"no JVM reader sources at {BUILD_SCRIPT.parent} (an installed ferrymq_spark: "
                                   f"the Spark image has the jar in $SPARK_HOME/jars)")
    path = Path(_run_build_script("--path"))
    if not path.exists():
        if not build:
            raise JvmReaderUnavailable(f"the JVM reader's jar is not built ({path}): run {BUILD_SCRIPT}")
        path = Path(_run_build_script())
    return path


def _run_build_script(*args: str) -> str:
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise JvmReaderUnavailable(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def read_batch(spark, options: Mapping[str, str], reader: str = "auto"):
    """A batch read of ``options`` (the ``ferrymq`` format's options) as a DataFrame of
    ``ferrymq_spark.rows.SCHEMA``. The JVM reader's ranges are planned now (data loss below a
    queue's minimum is found here); the Python source plans when Spark runs the query."""
    opts = parse_options(options)
    if _use_python(spark, opts, reader):
        return _python_source(spark, options)
    with open_client(opts) as client:
        return _jvm_read(spark, plan_with(client, opts), client)


def read_plan(spark, plan: BatchPlan, client: BlockingConsumer, reader: str = "auto"):
    """A DataFrame of exactly ``plan``'s ranges (the drain's runs); ``client`` finds the brokers."""
    if _use_python(spark, plan.options, reader):
        return _python_source(spark, plan.reader_options())
    return _jvm_read(spark, plan, client)


def plan_json(plan: BatchPlan, client: BlockingConsumer) -> str:
    """The ``plan`` option of the ``ferrymq-jvm`` format: each partition's range with the broker
    to read it from, and how to pull."""
    o, config = plan.options, plan.options.client_config()
    partitions = plan.partitions()
    addrs = {(r.topic, r.broker_name): client.read_address(r.topic, r.broker_name) for r in partitions}
    return json.dumps({
        "ranges": [{**r.to_dict(), "addr": addrs[r.topic, r.broker_name]} for r in partitions],
        "failOnDataLoss": o.fail_on_data_loss,
        "consumerGroup": o.consumer_group,
        "pullBatchSize": o.pull.pull_batch_size,
        "pullPipelineDepth": o.pull.pull_pipeline_depth,
        "timeoutMillis": max(1, round(config.api_timeout * 1000)),
    })


def credential_options(config: ClientConfig) -> dict[str, str]:
    """The ACL keys as options of their own: Spark's redaction hides option values whose names
    match spark.redaction.regex (secret, token, access key) wherever it shows them."""
    c = config.credentials
    if c is None:
        return {}
    return {"accessKey": c.access_key, "secretKey": c.secret_key,
            **({"securityToken": c.security_token} if c.security_token else {})}


def _jvm_read(spark, plan: BatchPlan, client: BlockingConsumer):
    options = {"plan": plan_json(plan, client), **credential_options(plan.options.client_config())}
    log.info("reading %d messages in %d ranges with the JVM reader (%s)", plan.message_count,
             len(plan.partitions()), FORMAT)
    return spark.read.format(FORMAT).options(**options).load()


def _python_source(spark, options: Mapping[str, str]):
    from ferrymq_spark.source import FerryMQDataSource
    spark.dataSource.register(FerryMQDataSource)
    return spark.read.format("ferrymq").options(**options).load()


def _use_python(spark, opts: SourceOptions, reader: str) -> bool:
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    if reader == "python":
        return True
    why_not = jvm_unavailable(spark, opts.client_config())
    if why_not is None:
        return False
    if reader == "jvm":
        raise JvmReaderUnavailable(f"the JVM reader cannot read here: {why_not}")
    log.info("reading with the Python source (format ferrymq): %s", why_not)
    return True


def jvm_unavailable(spark, config: ClientConfig) -> str | None:
    """Why the JVM reader cannot serve this session and client config, or None when it can."""
    if config.tls is not None:
        return "it does not speak TLS, and the client config asks for TLS (FERRYMQ_TLS)"
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return "the session has no JVM gateway (Spark Connect)"
    from py4j.protocol import Py4JError
    try:  # resolves the format as spark.read.format() will: through the session's class loader
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            FORMAT, spark._jsparkSession.sessionState().conf())
    except Py4JError:
        return (f"format {FORMAT} is not on the session's classpath (add the jar that spark-jobs/jvm/build.sh builds "
                f"to spark.jars)")
    return None
