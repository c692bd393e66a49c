"""The master's head timeline behind a slave's lag in seconds (ha/lag.py): how long ago the
master first had a byte the slave has not acknowledged, 0 when it has everything, never
younger than the truth once the timeline is full and has coarsened; and the runtime-info
entries that carry the lag to admin tools and the operator."""

from __future__ import annotations

import json

import pytest

from ferrymq.broker.ha.lag import HeadTimeline
from ferrymq.broker.runtime_info import replication_entries


def test_lag_is_the_age_of_the_first_byte_the_slave_lacks():
    t = HeadTimeline(resolution=0.05)
    t.advanced(1000, now=10.0)   # loaded with 1000 bytes at t=10
    t.advanced(1500, now=12.0)
    t.advanced(1800, now=15.0)
    assert t.seconds_behind(1800, now=20.0) == 0     # level
    assert t.seconds_behind(1500, now=20.0) == 5.0   # bytes 1500.. arrived at 15
    assert t.seconds_behind(1499, now=20.0) == 8.0   # byte 1499 arrived at 12
    assert t.seconds_behind(0, now=20.0) == 10.0     # older than the timeline: since it began
    assert t.seconds_behind(-1, now=20.0) == 10.0    # a slave that reported nothing yet


def test_arrivals_within_the_resolution_share_one_point_and_keep_its_first_time():
    t = HeadTimeline(resolution=0.05)
    t.advanced(100, now=1.0)
    t.advanced(200, now=2.0)
    t.advanced(300, now=2.01)
    t.advanced(250, now=2.02)  # a head that went nowhere new adds nothing
    assert t.points == [(100, 1.0), (300, 2.0)]
    assert t.seconds_behind(250, now=3.0) == pytest.approx(1.0)


def test_a_full_timeline_merges_neighbours_and_never_reports_less_than_the_truth():
    t = HeadTimeline(resolution=0.0, max_points=8)
    for i in range(1, 101):
        t.advanced(i * 10, now=float(i))
    assert len(t.points) <= 8
    for acked in range(0, 1000, 7):
        truth = 100 - (acked // 10 + 1) + 1 if acked < 1000 else 0  # byte acked+1 arrived at (acked//10 + 1)
        assert t.seconds_behind(acked, now=101.0) >= truth - 1e-9


def test_points_every_slave_is_past_are_forgotten_but_the_newest_stays():
    t = HeadTimeline(resolution=0.0)
    for i in range(1, 6):
        t.advanced(i * 100, now=float(i))
    t.forget_through(300)
    assert t.points == [(300, 3.0), (400, 4.0), (500, 5.0)]
    t.forget_through(10_000)
    assert t.points == [(500, 5.0)]
    assert t.seconds_behind(400, now=6.0) == 1.0


def test_a_timeline_too_small_to_hold_a_gap_is_refused():
    with pytest.raises(ValueError, match="at least 2 points"):
        HeadTimeline(max_points=1)


def test_runtime_info_carries_each_slaves_lag_and_rocketmqs_slave_fall_behind_much():
    master = {"role": "SYNC_MASTER", "maxPhyOffset": 5000, "ackedByAnySlave": 4000,
              "slaves": [{"address": "10.0.0.2:4000", "ackedOffset": 4000, "lagBytes": 1000, "lagSeconds": 1.5}]}
    entries = replication_entries(master)
    assert entries["ferrymqHaRole"] == "SYNC_MASTER" and entries["slaveFallBehindMuch"] == "1000"
    assert json.loads(entries["ferrymqHaSlaves"]) == master["slaves"]
    assert "ferrymqHaConnected" not in entries and "ferrymqHaEpoch" not in entries
    slave = {"role": "SLAVE", "maxPhyOffset": 900, "masterAddress": "10.0.0.1:10912", "connected": True,
             "confirmedOffset": 900, "masterOffset": 1000}
    assert replication_entries(slave) == {"ferrymqHaRole": "SLAVE", "ferrymqHaMasterAddress": "10.0.0.1:10912",
                                          "ferrymqHaConnected": "true", "ferrymqHaLagBytes": "100"}
    # failover: a demoted master keeps its (idle) master side; both sides and the epoch are shown
    demoted = {**slave, "epoch": 3, "slaves": [], "identity": 0}
    entries = replication_entries(demoted)
    assert entries["ferrymqHaEpoch"] == "3" and entries["ferrymqHaSlaves"] == "[]"
    assert entries["ferrymqHaIdentity"] == "0"  # which member it is (the operator maps it to its pod)
    assert entries["ferrymqHaConnected"] == "true"
