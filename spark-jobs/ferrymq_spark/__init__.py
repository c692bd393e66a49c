"""FerryMQ as a Spark 4 data source (batch and streaming reads) and sink (batch and streaming
writes, exactly once per batch), and the helpers a pipeline needs around it: plan a read's offsets,
commit them back to the consumer group.

    from ferrymq_spark import FerryMQDataSource
    spark.dataSource.register(FerryMQDataSource)
    df = spark.read.format("ferrymq").option("namesrv", "127.0.0.1:9876").option("subscribe", "Orders").load()

    from ferrymq_spark import read_batch  # batch reads by the JVM reader where the session has its jar
    df = read_batch(spark, {"namesrv": "127.0.0.1:9876", "subscribe": "Orders"})

    # exactly once per batch, by transactional messages (sink_commit.py)
    df.write.format("ferrymq").mode("append").option("namesrv", "127.0.0.1:9876").option("topic", "Enriched").save()

Names are imported on first use, so ``ferrymq_spark.k8s_cronjob`` (pure manifest building)
imports without pyspark or pyarrow installed.
"""

from importlib import import_module

_EXPORTS = {
    "FerryMQDataSource": "ferrymq_spark.source",
    "SCHEMA": "ferrymq_spark.rows",
    "plan_batch": "ferrymq_spark.planning",
    "BatchPlan": "ferrymq_spark.planning",
    "commit_offsets": "ferrymq_spark.commit",
    "OffsetRange": "ferrymq_spark.offsets",
    "OffsetsError": "ferrymq_spark.offsets",
    "OptionsError": "ferrymq_spark.options",
    "DataLossError": "ferrymq_spark.queue_reader",
    "read_batch": "ferrymq_spark.jvm_reader",
    "JvmReaderUnavailable": "ferrymq_spark.jvm_reader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ferrymq_spark' has no attribute {name!r}")
