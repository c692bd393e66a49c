"""Pure parts of ferrymq_spark: offsets JSON, range splitting, rate limiting, options."""

from __future__ import annotations

import pytest

from ferrymq_spark.drain import RunManifest, find_pending
from ferrymq_spark.offsets import (
    OffsetRange,
    OffsetsError,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
    ranges_between,
    run_id,
    split_ranges,
)
from ferrymq_spark.options import DEFAULT_GROUP, OptionsError, parse_options


def test_offsets_json_round_trip_and_errors():
    offsets = {("B", "broker-b", 1): 7, ("A", "broker-a", 10): 3, ("A", "broker-a", 2): -2}
    as_json = offsets_to_json(offsets)
    assert as_json == {"A": {"broker-a": {"2": -2, "10": 3}}, "B": {"broker-b": {"1": 7}}}
    assert offsets_from_json(as_json) == offsets
    import json
    assert offsets_from_json(json.dumps(as_json)) == offsets
    for bad, message in [("{", "not valid JSON"), ("[1]", "must be a JSON object"),
                         ('{"A": 1}', "must map broker names"), ('{"A": {"b": 1}}', "must map queue ids"),
                         ('{"A": {"b": {"x": 1}}}', "queue id 'x'"), ('{"A": {"b": {"0": -3}}}', "must be an integer >= -2"),
                         ('{"A": {"b": {"0": "5"}}}', "must be an integer"), ('{"A": {"b": {"0": true}}}', "must be an integer")]:
        with pytest.raises(OffsetsError, match=message):
            offsets_from_json(bad)


def test_split_ranges_keeps_every_offset_once():
    ranges = [OffsetRange("T", "b", 0, 0, 1000), OffsetRange("T", "b", 1, 50, 60), OffsetRange("T", "b", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges dropped
    assert split_ranges(ranges, 2) == ranges[:2]
    parts = split_ranges(ranges, 20)
    assert len(parts) >= 20
    for q, (start, end) in {0: (0, 1000), 1: (50, 60)}.items():
        mine = sorted((p.start, p.end) for p in parts if p.queue_id == q)
        assert mine[0][0] == start and mine[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))  # contiguous, no overlap
    assert sum(p.size for p in parts) == 1010
    tiny = split_ranges([OffsetRange("T", "b", 0, 0, 3)], 10)
    assert [(p.start, p.end) for p in tiny] == [(0, 1), (1, 2), (2, 3)]


def test_rate_limit_spreads_the_limit_in_proportion_and_never_starves_a_queue():
    a, b, c = ("T", "x", 0), ("T", "x", 1), ("T", "x", 2)
    start = {a: 0, b: 100, c: 5}
    latest = {a: 900, b: 200, c: 5}
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 10_000) == latest
    end = rate_limit(start, latest, 100)
    assert end == {a: 90, b: 110, c: 5}
    assert rate_limit({a: 0, b: 0}, {a: 1000, b: 1}, 10) == {a: 9, b: 1}


def test_ranges_between_and_run_id():
    start = {("T", "x", 0): 5, ("T", "x", 1): 7}
    end = {("T", "x", 0): 9, ("T", "x", 1): 7, ("T", "x", 2): 3}
    ranges = ranges_between(start, end)
    assert ranges == [OffsetRange("T", "x", 0, 5, 9), OffsetRange("T", "x", 2, 0, 3)]
    assert run_id(ranges) == run_id(list(reversed(ranges)))
    assert run_id(ranges) != run_id(ranges[:1])
    assert run_id(ranges)[0].isalpha() and len(run_id(ranges)) == 16


def test_find_pending_matches_only_an_uncommitted_run_from_the_current_offsets():
    start, end = {("T", "x", 0): 5}, {("T", "x", 0): 9}
    done = RunManifest("g", {("T", "x", 0): 0}, start, "committed")
    pending = RunManifest("g", start, end)
    assert find_pending([done, pending], "g", start) is pending
    assert find_pending([done, pending], "other", start) is None
    assert find_pending([done], "g", {("T", "x", 0): 0}) is None
    assert RunManifest.from_json(pending.to_json()) == pending


def test_parse_options_defaults_case_and_client_settings():
    opts = parse_options({"SUBSCRIBE": "A, B", "namesrv": "h:1;h:2", "ferrymq.apiTimeout": "7.5",
                          "ferrymq.pullbatchsize": "16", "maxoffsetspertrigger": "100"})
    assert opts.topics == ("A", "B") and opts.namesrv == "h:1;h:2"
    assert (opts.starting_offsets, opts.ending_offsets, opts.fail_on_data_loss) == ("earliest", "latest", True)
    assert opts.consumer_group == DEFAULT_GROUP and not opts.group_given and not opts.commit_to_group
    assert opts.max_offsets_per_trigger == 100 and opts.pull.pull_batch_size == 16
    config = opts.client_config()
    assert config.api_timeout == 7.5 and config.namesrv_addr == "h:1;h:2"

    stream = parse_options({"subscribe": "A", "namesrv": "h:1", "consumerGroup": "g"}, streaming=True)
    assert stream.starting_offsets == "latest" and stream.commit_to_group


@pytest.mark.parametrize("options, message", [
    ({"namesrv": "h:1"}, "option subscribe is required"),
    ({"subscribe": "A"}, "option namesrv is required"),
    ({"subscribe": "A B", "namesrv": "h:1"}, "invalid topic 'A B'"),
    ({"subscribe": "A", "namesrv": "h:1", "startingOffsets": "first"}, "must be one of earliest, latest, group"),
    ({"subscribe": "A", "namesrv": "h:1", "endingOffsets": "earliest"}, "must be one of latest or a JSON"),
    ({"subscribe": "A", "namesrv": "h:1", "startingOffsets": '{"A": 1}'}, "must map broker names"),
    ({"subscribe": "A", "namesrv": "h:1", "startingOffsets": "group"}, "needs the option consumerGroup"),
    ({"subscribe": "A", "namesrv": "h:1", "minPartitions": "0"}, "minPartitions: 0 is below the minimum 1"),
    ({"subscribe": "A", "namesrv": "h:1", "maxOffsetsPerTrigger": "ten"}, "is not an integer"),
    ({"subscribe": "A", "namesrv": "h:1", "failOnDataLoss": "yes"}, "must be true or false"),
    ({"subscribe": "A", "namesrv": "h:1", "ferrymq.apiTimeout": "soon"}, "apiTimeout: 'soon' is not a valid float"),
    ({"subscribe": "A", "namesrv": "h:1", "ferrymq.serializeType": "ROCKETMQ"}, "unknown option ferrymq.serializetype"),
    ({"subscribe": "A", "namesrv": "h:1", "kafka.bootstrap.servers": "x"}, "unknown option 'kafka.bootstrap.servers'"),
])
def test_bad_options_are_one_clear_error(options, message):
    with pytest.raises(OptionsError, match=message):
        parse_options(options)


def test_ending_offsets_are_for_batch_queries_only():
    with pytest.raises(OptionsError, match="endingOffsets is for batch queries only"):
        parse_options({"subscribe": "A", "namesrv": "h:1", "endingOffsets": "latest"}, streaming=True)


def test_sink_batch_options_default_parse_and_refuse_bad_values():
    from ferrymq_spark.sink_options import parse_sink_options

    defaults = parse_sink_options({"namesrv": "h:1", "topic": "T"}, streaming=False)
    assert (defaults.batch_size, defaults.max_in_flight, defaults.send_timeout_ms) == (256, 4, 30_000)
    given = parse_sink_options({"namesrv": "h:1", "topic": "T", "batchSize": "64", "MAXINFLIGHT": "2",
                                "sendTimeoutMs": "5000"}, streaming=False)
    assert (given.batch_size, given.max_in_flight, given.send_timeout_ms) == (64, 2, 5000)
    for name, value, message in (("batchSize", "0", "batchSize: 0 is below the minimum 1"),
                                 ("maxInFlight", "many", "maxInFlight: 'many' is not an integer")):
        with pytest.raises(OptionsError, match=message):
            parse_sink_options({"namesrv": "h:1", "topic": "T", name: value}, streaming=False)
