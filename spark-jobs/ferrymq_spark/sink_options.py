"""The sink's options (``df.write.format("ferrymq")``, ``writeStream.format("ferrymq")``),
parsed once with one clear error per bad value.

Names follow Spark's Kafka sink where they mean the same thing (``topic``; ``transactionalId``
as Kafka's ``transactional.id``); ``ferrymq.<clientSetting>`` go to the client's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ferrymq.client.config import ClientConfig
from ferrymq.common.validators import validate_group, validate_topic

from ferrymq_spark.options import CLIENT_PREFIX, OptionsError, apply_client_settings, int_option, lookup

DEFAULT_PRODUCER_GROUP = "spark-ferrymq-sink"
DEFAULT_COMMIT_TOPIC = "SPARK_SINK_COMMITS"

KNOWN = {k.lower(): k for k in ("namesrv", "topic", "producerGroup", "transactionalId", "commitTopic",
                                "batchSize", "maxInFlight", "sendTimeoutMs")}
# Spark passes its own options of a query to the sink too.
SPARK_OWN = {"path", "checkpointlocation", "queryname"}


@dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None  # None: every row names its topic
    producer_group: str
    transactional_id: str  # names the query's batches in the commit topic; stable across restarts
    commit_topic: str
    batch_size: int = 256  # rows per request of half messages (one per queue a batch's rows go to)
    max_in_flight: int = 4  # such batches a task has in flight at once
    send_timeout_ms: int = 30_000  # a request's deadline, its retries included (a busy broker is waited for)
    client_settings: dict[str, str] = field(default_factory=dict)

    def client_config(self) -> ClientConfig:
        config = ClientConfig(namesrv_addr=self.namesrv)
        apply_client_settings(self.client_settings, config)
        return config


def _topic(opts: dict[str, str], name: str, default: str | None) -> str | None:
    value = opts.get(name.lower(), default)
    if value is None:
        return None
    value = value.strip()
    error = validate_topic(value)
    if error:
        raise OptionsError(f"option {KNOWN[name.lower()]}: invalid topic {value!r}: {error}")
    return value


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    opts = lookup(options)
    unknown = [k for k in opts if k not in KNOWN and k not in SPARK_OWN and not k.startswith(CLIENT_PREFIX)]
    if unknown:
        raise OptionsError(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(KNOWN.values()))}, "
                           f"and {CLIENT_PREFIX}<client setting>)")
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise OptionsError("option namesrv is required: the name server address, host:port[;host:port]")
    group = opts.get("producergroup", DEFAULT_PRODUCER_GROUP).strip()
    if validate_group(group):
        raise OptionsError(f"option producerGroup: invalid group {group!r}: {validate_group(group)}")
    transactional_id = opts.get("transactionalid", "").strip()
    if streaming and not transactional_id:
        # What makes a re-run batch recognisable after a restart: the query's own name for
        # itself, which must not change while its checkpoint lives (Kafka's transactional.id).
        raise OptionsError("option transactionalId is required for a streaming write: a name of the query's "
                           "own, the same at every restart of it (e.g. its checkpoint's name)")
    if "|" in transactional_id or "/" in transactional_id:
        raise OptionsError(f"option transactionalId: {transactional_id!r} must not contain '|' or '/'")
    def positive(name: str, default: int) -> int:
        value = int_option(opts, name, 1)
        return default if value is None else value
    client_settings = {k[len(CLIENT_PREFIX):]: v for k, v in opts.items() if k.startswith(CLIENT_PREFIX)}
    apply_client_settings(client_settings, ClientConfig())  # refused here, on the driver, not in a task
    return SinkOptions(namesrv=namesrv, topic=_topic(opts, "topic", None), producer_group=group,
                       transactional_id=transactional_id, commit_topic=_topic(opts, "commitTopic", DEFAULT_COMMIT_TOPIC),
                       batch_size=positive("batchSize", SinkOptions.batch_size),
                       max_in_flight=positive("maxInFlight", SinkOptions.max_in_flight),
                       send_timeout_ms=positive("sendTimeoutMs", SinkOptions.send_timeout_ms),
                       client_settings=client_settings)
