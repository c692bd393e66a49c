"""Shared by the Spark tests and bench/spark_read_bench.py: topics routed, fast producing,
and one local SparkSession for the whole session."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import sys
from dataclasses import dataclass

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from testkit.wait import wait_until


@dataclass(frozen=True)
class Sent:
    msg_id: str
    queue_id: int
    queue_offset: int
    sha256: str
    size: int
    keys: str


def make_spark_session(app: str = "ferrymq-tests", cores: int = 2):
    """A local SparkSession whose Python workers run this interpreter (so they import
    ferrymq and ferrymq_spark from this venv), with the ferrymq format registered and the JVM
    reader's jar (format ferrymq-jvm) on its classpath."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Java 17 is needed for Spark (no java on PATH and no JAVA_HOME)")
    # PySpark starts its Python workers with PYSPARK_PYTHON (default: python3 on PATH), not with
    # the driver's interpreter; spark.pyspark.python is only read by spark-submit.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from ferrymq_spark import FerryMQDataSource
    from ferrymq_spark.jvm_reader import jar_path
    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app)
             .config("spark.jars", str(jar_path()))  # the JVM reader (format ferrymq-jvm), built if needed
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(FerryMQDataSource)
    return spark


async def create_topic(namesrv: str, topic: str, queues: int, timeout: float = 30.0) -> None:
    """Create the topic and wait until the name server routes it (the broker re-registers)."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, read_queues=queues, write_queues=queues)

        async def routed() -> bool:
            route = await admin.instance.fetch_route(topic)
            return route is not None and len(route.publish_queues(topic)) == queues

        await wait_until(routed, timeout, f"the name server routing {topic} to {queues} queues", interval=0.05)


async def produce(namesrv: str, topic: str, count: int, *, queues: int, batch: int = 128, seed: int = 7,
                  min_size: int = 1, max_size: int = 2048, concurrency: int = 8) -> list[Sent]:
    """``count`` messages with random bodies (sizes min_size..max_size), round-robin over the
    queues in batches of ``batch`` (SEND_BATCH_MESSAGE). Returns what was acknowledged."""
    rng = random.Random(seed)
    async with Producer(f"spark-test-producer-{seed}", namesrv_addr=namesrv) as producer:
        route = await producer.instance.route(topic, refresh=True)
        mqs = route.publish_queues(topic)[:queues]
        sem = asyncio.Semaphore(concurrency)
        sent: list[Sent] = []

        async def one(n: int, first: int) -> None:
            # Bodies are made under the semaphore: made up front by every coroutine at once, they
            # held the event loop for seconds while the first sends waited for their connection
            # (their 3 s timeout ran out on a busy machine).
            async with sem:
                bodies = [rng.randbytes(rng.randint(min_size, max_size)) for _ in range(n)]
                msgs = [Message(topic, b, properties={"KEYS": f"k{first + i}", "TAGS": f"T{(first + i) % 3}",
                                                      "app": "spark-test"}) for i, b in enumerate(bodies)]
                result = await producer.send_batch(msgs, queue=mqs[(first // batch) % len(mqs)])
            ids = result.msg_id.split(",")
            for i, (m, mid) in enumerate(zip(msgs, ids)):
                sent.append(Sent(mid, result.message_queue.queue_id, result.queue_offset + i,
                                 hashlib.sha256(m.body).hexdigest(), len(m.body), f"k{first + i}"))

        await asyncio.gather(*(one(min(batch, count - first), first) for first in range(0, count, batch)))
    assert len(sent) == count
    return sent
