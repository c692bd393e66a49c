"""Committing back: store the end offsets Spark consumed as the consumer group's offsets.

Call it only after the output is durably written (Spark's job commit returned): then the
group's lag, ``ferrymq admin`` and the broker's fall-behind protection describe what Spark
really consumed, and a crash before this call makes the next run read the same messages
again rather than lose them.
"""

from __future__ import annotations

from typing import Mapping

from ferrymq.client.config import ClientConfig

from ferrymq_spark.blocking_client import BlockingConsumer
from ferrymq_spark.offsets import Offsets, offsets_from_json, offsets_to_json
from ferrymq_spark.options import OptionsError
from ferrymq_spark.planning import BatchPlan


def commit_offsets(what: BatchPlan | Mapping | str, *, namesrv: str | None = None,
                   consumer_group: str | None = None, config: ClientConfig | None = None) -> dict:
    """Commit a plan's end offsets (or offsets JSON, as Spark's streaming progress shows them)
    to a consumer group. Returns the committed offsets as JSON."""
    if isinstance(what, BatchPlan):
        opts = what.options
        if not opts.group_given and consumer_group is None:
            raise OptionsError("commit_offsets needs a consumer group: plan with consumerGroup or pass consumer_group")
        offsets: Offsets = what.end
        group = consumer_group or opts.consumer_group
        config = config or opts.client_config()
    else:
        offsets = dict(what) if isinstance(what, Mapping) and what and isinstance(next(iter(what)), tuple) \
            else offsets_from_json(what, "offsets to commit")
        if not consumer_group:
            raise OptionsError("commit_offsets needs consumer_group")
        group = consumer_group
        config = config or ClientConfig()
    if namesrv:
        config.namesrv_addr = namesrv
    with BlockingConsumer(group, config) as client:
        client.commit_offsets(offsets)
    return offsets_to_json(offsets)
