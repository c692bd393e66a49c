"""What the jobs in ``spark-jobs/jobs`` share: their logging and their SparkSession (UTC
session time zone; with ``--master local[...]``, Python workers on this interpreter). Under
spark-submit no master is given here: spark-submit set it."""

from __future__ import annotations

import logging
import os
import sys


def configure_job_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def start_session(app_name: str, master: str | None):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            # Local Python workers must run this interpreter (PySpark defaults to python3 on PATH).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()
