"""The source's options, parsed once into a dataclass with one clear error per bad value.

Names follow Spark's Kafka source where they mean the same thing (``subscribe``,
``startingOffsets``, ``endingOffsets``, ``startingTimestamp``, ``maxOffsetsPerTrigger``,
``minPartitions``, ``failOnDataLoss``). Spark hands options over case-insensitively (lower-cased
keys), so every lookup here is case-insensitive too. ``ferrymq.<clientSetting>`` options go to
the client's settings through FerryMQ's one config loader.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from ferrymq.client.config import ClientConfig
from ferrymq.common.config_loader import ConfigError, apply_settings
from ferrymq.common.validators import validate_group, validate_topic
from ferrymq.common.naming import camel_case

from ferrymq_spark.offsets import OffsetsError, offsets_from_json

CLIENT_PREFIX = "ferrymq."
DEFAULT_GROUP = "spark-ferrymq-source"

KNOWN = {k.lower(): k for k in (
    "subscribe", "startingOffsets", "endingOffsets", "startingTimestamp", "maxOffsetsPerTrigger",
    "minPartitions", "failOnDataLoss", "namesrv", "consumerGroup", "commitToGroup",
)}


# Client fields with an option of their own (namesrv) or no text form.
_NOT_SETTABLE = {"namesrv_addr", "serialize_type"}


class OptionsError(ValueError):
    """A bad option; the message names the option and what it accepts."""


# What docs/spark.md#bulk-reads advises for a broker that mostly feeds Spark: a pull answers up to 1 024
# messages / 1 MiB instead of RocketMQ's 32 / 256 KiB, so each chunk (pull_batch_size
# offsets) takes one round trip. Broker config keys (``--set``, or a Broker's spec.config).
BULK_READ_BROKER_SETTINGS = {"maxTransferCountOnMessageInMemory": "1024",
                             "maxTransferBytesOnMessageInMemory": "1048576"}


@dataclass
class PullSettings:
    """How executors pull (``ferrymq.pullBatchSize`` ...), beside the client's own settings."""

    # Offsets per fetched chunk, asked for in one PULL_MESSAGE; the broker answers at most its
    # maxTransferCountOnMessageInMemory / ...BytesOnMessageInMemory (32 / 256 KiB by default, as
    # RocketMQ) and the chunk pulls again for the rest. Large chunks cost fewer round trips and
    # thread hops; a broker tuned for bulk reads answers them in one pull (docs/spark.md#bulk-reads).
    pull_batch_size: int = 1024
    pull_pipeline_depth: int = 8  # pulls in flight per task
    rows_per_batch: int = 8192  # rows per Arrow record batch handed to Spark


@dataclass
class SourceOptions:
    topics: tuple[str, ...]
    namesrv: str
    consumer_group: str
    group_given: bool
    starting_offsets: str = "earliest"  # earliest | latest | group | JSON
    ending_offsets: str = "latest"  # latest | JSON (batch only)
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    commit_to_group: bool = False
    client_settings: dict[str, str] = field(default_factory=dict)
    pull: PullSettings = field(default_factory=PullSettings)

    def client_config(self) -> ClientConfig:
        config = ClientConfig(namesrv_addr=self.namesrv)
        apply_client_settings(self.client_settings, config, PullSettings())
        return config


def lookup(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def int_option(opts: dict[str, str], name: str, minimum: int) -> int | None:
    """Option ``name`` as an integer of at least ``minimum``; None when not given."""
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionsError(f"option {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise OptionsError(f"option {name}: {value} is below the minimum {minimum}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionsError(f"option {name}: {raw!r} must be true or false")
    return raw.strip().lower() == "true"


def apply_client_settings(settings: Mapping[str, str], *targets) -> None:
    """``apitimeout`` (lower-cased by Spark) -> the field ``api_timeout`` of a target."""
    by_lower = {camel_case(f.name).lower(): camel_case(f.name) for t in targets for f in dataclasses.fields(t)
                if f.name not in _NOT_SETTABLE}
    named = {}
    for key, value in settings.items():
        real = by_lower.get(key.lower())
        if real is None:
            known = ", ".join(sorted(CLIENT_PREFIX + v for v in by_lower.values()))
            raise OptionsError(f"unknown option {CLIENT_PREFIX}{key} (client settings: {known})")
        named[real] = value
    try:
        apply_settings(named, *targets)
    except ConfigError as e:
        raise OptionsError(f"option {CLIENT_PREFIX}{e}") from None


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    opts = lookup(options)
    unknown = [k for k in opts if k not in KNOWN and not k.startswith(CLIENT_PREFIX)]
    if unknown:
        raise OptionsError(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(KNOWN.values()))}, "
                           f"and {CLIENT_PREFIX}<client setting>)")

    topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    if not topics:
        raise OptionsError("option subscribe is required: a comma-separated list of topics")
    for t in topics:
        error = validate_topic(t)
        if error:
            raise OptionsError(f"option subscribe: invalid topic {t!r}: {error}")
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise OptionsError("option namesrv is required: the name server address, host:port[;host:port]")
    group = opts.get("consumergroup", "").strip()
    if group and validate_group(group):
        raise OptionsError(f"option consumerGroup: invalid group {group!r}: {validate_group(group)}")

    starting = opts.get("startingoffsets", "latest" if streaming else "earliest").strip()
    _check_offsets_option("startingOffsets", starting, ("earliest", "latest", "group"))
    if starting.lower() == "group" and not group:
        raise OptionsError("startingOffsets=group needs the option consumerGroup")
    ending = opts.get("endingoffsets", "latest").strip()
    if streaming and "endingoffsets" in opts:
        raise OptionsError("option endingOffsets is for batch queries only")
    _check_offsets_option("endingOffsets", ending, ("latest",))

    client_settings = {k[len(CLIENT_PREFIX):]: v for k, v in opts.items() if k.startswith(CLIENT_PREFIX)}
    pull = PullSettings()
    apply_client_settings(client_settings, ClientConfig(), pull)
    if min(pull.pull_batch_size, pull.rows_per_batch, pull.pull_pipeline_depth) < 1:
        raise OptionsError("options ferrymq.pullBatchSize, ferrymq.pullPipelineDepth and ferrymq.rowsPerBatch "
                           "must be at least 1")

    return SourceOptions(
        topics=topics,
        namesrv=namesrv,
        consumer_group=group or DEFAULT_GROUP,
        group_given=bool(group),
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=int_option(opts, "startingTimestamp", 0),
        max_offsets_per_trigger=int_option(opts, "maxOffsetsPerTrigger", 1),
        min_partitions=int_option(opts, "minPartitions", 1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        # A streaming query with a named group commits its progress there by default.
        commit_to_group=_bool(opts, "commitToGroup", streaming and bool(group)),
        client_settings=client_settings,
        pull=pull,
    )


def _check_offsets_option(name: str, value: str, words: tuple[str, ...]) -> None:
    if value.lower() in words:
        return
    if not value.startswith("{"):
        raise OptionsError(f"option {name}: {value!r} must be one of {', '.join(words)} or a JSON object")
    try:
        offsets_from_json(value, name)
    except OffsetsError as e:
        raise OptionsError(str(e)) from None
