"""The fault-injection suite's checker (e2e/chaos/checker.py) on hand-built histories: one clean
history, and one per anomaly that only that anomaly explains."""

from __future__ import annotations

import json

import pytest

from e2e.chaos.checker import check, main, report, rows, table, unavailability
from e2e.chaos.history import History, Read, Send, load, parse_lines
from e2e.chaos.results import write_results

B = "broker-a"


def sent(key: str, queue: int, offset: int, t: float, status: str = "SEND_OK", digest: str | None = None,
         t1: float | None = None) -> Send:
    return Send(key, digest or f"d-{key}", t, t + 0.01 if t1 is None else t1, status, B, queue, offset)


def failed(key: str, t: float, t1: float | None = None, error: str = "timeout") -> Send:
    return Send(key, f"d-{key}", t, t + 1 if t1 is None else t1, "FAILED", error=error)


def read(key: str, queue: int, offset: int, t: float = 100.0, consumer: str = "c1", session: str = "s1",
         digest: str | None = None, broker: str = B) -> Read:
    return Read(key, digest or f"d-{key}", broker, queue, offset, t, consumer, session)


def clean(n: int = 6) -> History:
    """n keys on two queues, each acknowledged and read once, in order."""
    sends = [sent(f"k{i}", i % 2, i // 2, 10 + i * 0.1) for i in range(n)]
    reads = [read(s.key, s.queue, s.offset) for s in sorted(sends, key=lambda s: (s.queue, s.offset))]
    return History(sends, reads)


def test_a_clean_history_is_valid():
    r = check(clean())
    assert r.valid and r.problems() == []
    assert (r.attempts, r.acknowledged, r.failed, r.reads, r.keys_read) == (6, 6, 0, 6, 6)
    assert not (r.lost or r.unseen or r.inconsistent or r.nonmonotonic or r.duplicates or r.poll_skips or r.windows)


def test_lost_write_acknowledged_never_read_while_a_later_offset_was():
    h = clean()
    h.reads = [x for x in h.reads if x.key != "k2"]  # k2: queue 0 offset 1; k4 at offset 2 was read
    r = check(h)
    assert [(m.key, m.position, m.highest_read) for m in r.lost] == [("k2", (B, 0, 1), 2)]
    assert r.unseen == [] and not r.valid


def test_unseen_acknowledged_never_read_and_nothing_after_it():
    h = clean()
    h.reads = [x for x in h.reads if x.key != "k4"]  # the last offset of queue 0
    r = check(h)
    assert [(m.key, m.position) for m in r.unseen] == [("k4", (B, 0, 2))]
    assert r.lost == [] and not r.valid


def test_not_acknowledged_statuses_are_no_acknowledgement_and_counted_apart():
    h = clean()
    h.sends += [sent("x1", 0, 3, 20, "FLUSH_SLAVE_TIMEOUT"), sent("x2", 1, 3, 20.1, "SLAVE_NOT_AVAILABLE"),
                failed("x3", 20.2)]
    r = check(h)  # none of them read: not lost, not unseen
    assert r.valid and r.acknowledged == 6 and r.failed == 1
    assert r.stored_not_acked == {"FLUSH_SLAVE_TIMEOUT": 1, "SLAVE_NOT_AVAILABLE": 1}
    # ... and one of them at a position another acknowledged key holds is no inconsistency either
    h.sends.append(sent("k9", 0, 3, 30))
    h.reads.append(read("k9", 0, 3))
    assert check(h).inconsistent == []


def test_inconsistent_offsets_two_keys_read_at_one_offset():
    h = clean()
    h.reads.append(read("k2", 0, 1, consumer="c2", session="a"))
    h.reads.append(read("other", 0, 1, consumer="c3", session="b"))
    r = check(h)
    assert [(i.position, i.keys) for i in r.inconsistent] == [((B, 0, 1), ("k2", "other"))]
    assert not r.valid


def test_inconsistent_offsets_a_read_against_an_acknowledgement():
    h = clean()
    h.sends.append(sent("late", 1, 3, 30))
    h.reads.append(read("intruder", 1, 3))  # the acknowledged position read holding another key
    h.reads.append(read("late", 1, 4))  # ... and the acknowledged key elsewhere
    r = check(h)
    assert [(i.position, i.keys, i.acked) for i in r.inconsistent] == [((B, 1, 3), ("intruder", "late"), ("late",))]
    assert [(m.key, m.acked_position) for m in r.misplaced] == [("late", (B, 1, 3))]


def test_same_offset_on_another_broker_is_another_position():
    h = clean()
    h.reads.append(read("elsewhere", 0, 1, broker="broker-b", session="b"))
    assert check(h).inconsistent == []


def test_corrupt_body_digest():
    h = clean()
    h.reads[0] = read(h.reads[0].key, h.reads[0].queue, h.reads[0].offset, digest="garbage")
    r = check(h)
    assert [(c.key, c.read_digest) for c in r.corrupt] == [("k0", "garbage")] and not r.valid


def test_nonmonotonic_offsets_within_one_consumer_session():
    h = clean()
    q0 = [x for x in h.reads if x.queue == 0]
    h.reads.append(read(q0[0].key, 0, q0[0].offset))  # c1 s1 goes back to offset 0
    r = check(h)
    assert [(n.consumer, n.queue, n.previous, n.offset) for n in r.nonmonotonic] == [("c1", 0, 2, 0)]
    assert not r.valid
    assert r.redeliveries == 1 and r.duplicates == {}  # same key, same position


def test_going_back_in_a_new_session_or_another_consumer_is_not_nonmonotonic():
    h = clean()
    h.reads.append(read("k0", 0, 0, session="s2"))  # reassigned: restarts from a committed offset
    h.reads.append(read("k0", 0, 0, consumer="c2"))
    r = check(h)
    assert r.valid and r.nonmonotonic == [] and r.redeliveries == 2


def test_repeated_offset_in_one_session_is_nonmonotonic():
    h = clean()
    h.reads.insert(1, read("k0", 0, 0))
    assert [(n.previous, n.offset) for n in check(h).nonmonotonic] == [(0, 0)]


def test_poll_skip_is_reported_but_not_invalid():
    h = clean()
    h.reads = [x for x in h.reads if x.key != "k2"] + [read("k2", 0, 1, session="s9")]
    r = check(h)
    assert [(p.previous, p.offset) for p in r.poll_skips] == [(0, 2)]
    assert r.valid


def test_duplicates_one_key_at_several_offsets_are_counted_and_allowed():
    h = clean()
    h.sends.append(sent("dup", 1, 3, 30))
    h.reads += [read("dup", 1, 3), read("dup", 1, 4)]  # e.g. a resend stored twice
    r = check(h)
    assert r.duplicates == {"dup": ((B, 1, 3), (B, 1, 4))}
    assert r.valid and r.lost == [] and r.inconsistent == []


def test_reconsumed_messages_count_as_read_but_not_in_offset_order():
    h = clean()
    h.reads.append(Read("k0", "d-k0", B, 0, 0, 101, "c1", "s1", reconsume=1))
    r = check(h)
    assert r.valid and r.nonmonotonic == [] and r.redeliveries == 0
    h.reads = [x for x in h.reads if not (x.key == "k0" and x.reconsume == 0)]
    r = check(h)
    assert r.lost == [] and r.unseen == [] and r.keys_read == 6


def test_unacknowledged_but_read_is_allowed():
    h = clean()
    h.sends.append(sent("maybe", 0, 3, 30, "FLUSH_SLAVE_TIMEOUT"))
    h.reads.append(read("maybe", 0, 3))
    r = check(h)
    assert r.valid and r.unacked_read == 1


# -- write unavailability -------------------------------------------------------------------------


def test_unavailability_window_between_acknowledgements_with_failures():
    sends = [sent(f"a{i}", 0, i, 10 + i * 0.1) for i in range(10)]  # acked until 10.91
    sends += [failed(f"f{i}", 11 + i, 11 + i + 0.9) for i in range(5)]  # failing 11 .. 15.9
    sends += [sent(f"b{i}", 0, 10 + i, 16 + i * 0.1) for i in range(5)]  # first ack at 16.01
    w = unavailability(sends)
    assert len(w) == 1
    assert w[0].start == pytest.approx(10.91) and w[0].end == pytest.approx(16.01)
    assert (w[0].not_acked, w[0].open) == (5, False)
    r = check(History(sends, []))
    assert r.longest_window == pytest.approx(5.1)


def test_unavailability_a_slow_stretch_without_failures_counts_from_min_window():
    sends = [sent("a", 0, 0, 10), sent("slow", 0, 1, 10.02, t1=13.0), sent("c", 0, 2, 13.01)]
    assert [round(w.seconds, 2) for w in unavailability(sends, min_window=1.0)] == [2.99]
    assert unavailability(sends, min_window=5.0) == []
    # ordinary gaps between acknowledgements are no window
    assert unavailability([sent(f"a{i}", 0, i, 10 + i * 0.1) for i in range(20)]) == []


def test_unavailability_open_at_the_end_and_nothing_before_the_first_ack():
    sends = [failed("early", 9, 9.9), sent("a", 0, 0, 10), failed("f1", 11, 12), failed("f2", 12, 14)]
    w = unavailability(sends)
    assert [(round(x.start, 2), x.end, x.open) for x in w] == [(10.01, 14, True)]
    assert unavailability([failed("f", 1, 3), failed("g", 3, 5)])[0].seconds == 4


# -- the table, the report, the files ------------------------------------------------------------


def test_rows_aggregate_per_fault_kind():
    ok = check(clean(), fault="kill-master", time_to_ready=30)
    h = clean()
    h.sends += [failed("f", 11, 12), sent("z", 1, 3, 12.5)]
    h.reads.append(read("z", 1, 3))
    slow = check(h, fault="kill-master", time_to_ready=50)
    lost = clean()
    lost.reads = [x for x in lost.reads if x.key != "k2"]
    bad = check(lost, fault="partition")
    [kill, part] = rows([ok, slow, bad])
    assert (kill.fault, kill.runs, kill.acknowledged, kill.lost, kill.valid) == ("kill-master", 2, 13, 0, True)
    assert kill.unavailable_max == pytest.approx(12.51 - 10.51) and kill.ready_p50 == 40 and kill.ready_max == 50
    assert (part.runs, part.lost, part.valid, part.ready_p50) == (1, 1, False, None)
    text = table([ok, slow, bad])
    assert text.splitlines()[0].startswith("fault") and len(text.splitlines()) == 3
    assert "NO" in text.splitlines()[2]
    assert "lost 1" in report(bad)


def test_history_files_round_trip_and_a_truncated_line_is_skipped(tmp_path, capsys):
    prod, cons = tmp_path / "producer.jsonl", tmp_path / "consumer.jsonl"
    prod.write_text("\n".join([
        json.dumps({"op": "meta", "role": "producer"}),
        json.dumps({"op": "send", "key": "k0", "digest": "d0", "t0": 10000, "t1": 10010, "status": "SEND_OK",
                    "msgId": "m0", "broker": B, "queue": 0, "offset": 0, "error": None}),
        json.dumps({"op": "send", "key": "k1", "digest": "d1", "t0": 10100, "t1": 13100, "status": "FAILED",
                    "msgId": None, "broker": None, "queue": None, "offset": None, "error": "RemotingTimeoutException"}),
        json.dumps({"op": "progress", "sent": 2}),
        '{"op": "send", "key": "k2", "dig',
    ]) + "\n")
    cons.write_text(json.dumps({"op": "recv", "key": "k0", "digest": "d0", "broker": B, "queue": 0, "offset": 0,
                                "t": 10500, "consumer": "c1", "session": "1"}) + "\n")
    h = load(prod, cons)
    assert (len(h.sends), len(h.reads), h.skipped_lines, len(h.meta)) == (2, 1, 1, 1)
    assert h.sends[0].t0 == 10.0 and h.sends[1].error == "RemotingTimeoutException"
    r = check(h)
    assert r.valid and r.acknowledged == 1 and r.failed == 1 and r.errors == {"RemotingTimeoutException": 1}

    out = tmp_path / "results" / "chaos.json"
    assert main([str(prod), str(cons), "--fault", "none", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["git"]["commit"] and doc["machine"]["nproc"] >= 1
    assert doc["rows"][0]["fault"] == "none" and doc["runs"][0]["acknowledged"] == 1
    assert "1 acknowledged" in capsys.readouterr().out

    cons.write_text("")
    assert main([str(prod), str(cons)]) == 1  # k0 unseen


def test_write_results_names_commit_and_machine(tmp_path):
    doc = write_results(tmp_path / "r.json", [check(clean(), fault="none")], {"seed": 7})
    assert doc["seed"] == 7 and len(doc["git"]["commit"]) == 40 and doc["machine"]["memory_gib"] > 0
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["acknowledged"] == 6


def test_parse_lines_takes_the_source_as_process_name():
    h = parse_lines([json.dumps({"op": "recv", "key": "k", "broker": B, "queue": 1, "offset": 2, "t": 1})], "cons-7")
    assert h.reads[0].consumer == "cons-7" and h.reads[0].session == ""


def test_failures_are_grouped_by_reason_without_per_attempt_numbers():
    h = clean()
    h.sends += [Send("f1", None, 20, 21, "FAILED", error="MQClientException: Send [1] times, still failed, cost [2]ms"),
                Send("f2", None, 21, 22, "FAILED", error="MQClientException: Send [1] times, still failed, cost [5]ms"),
                Send("f3", None, 22, 23, "FAILED", error="MQBrokerException: CODE: 14 DESC: lost the controller", code=14)]
    assert check(h).errors == {"MQClientException: Send [N] times, still failed, cost [N]ms": 2,
                               "code 14: MQBrokerException: CODE: 14 DESC: lost the controller": 1}


def test_early_reads_a_key_read_before_its_send_was_answered():
    h = clean()
    h.sends.append(sent("slow", 1, 3, 30, t1=33))
    h.reads.append(read("slow", 1, 3, t=31))  # served while the master still waited for its slave
    r = check(h)
    assert r.early_reads == 1 and r.early_lead == 2 and r.valid and "1 before their send was answered" in report(r)


def test_a_rewind_within_a_session_is_one_nonmonotonic_step():
    h = clean()
    q0 = [x for x in h.reads if x.queue == 0]  # offsets 0, 1, 2
    h.reads += [read(x.key, 0, x.offset) for x in q0]  # the session reads 0, 1, 2 again
    r = check(h)
    assert [(n.previous, n.offset) for n in r.nonmonotonic] == [(2, 0)] and r.poll_skips == []


def _async_failover() -> History:
    """An ASYNC_MASTER failover: "gone" acknowledged at queue 1 offset 3 but never replicated,
    the new master gave that offset to "taker"; everything else read."""
    h = clean()
    h.sends += [sent("gone", 1, 3, 20), sent("taker", 1, 3, 25), sent("after", 1, 4, 26)]
    h.reads += [read("taker", 1, 3), read("after", 1, 4)]
    return h


def test_loss_allowed_counts_the_loss_and_the_offset_it_left_but_stays_valid():
    r = check(_async_failover(), loss_allowed=True)
    assert [m.key for m in r.lost] == ["gone"] and [x.keys for x in r.loss_shadows] == [("gone", "taker")]
    assert r.valid and r.problems() == []
    assert r.summary()["lost"] == 1 and r.summary()["loss_shadows"] == 1 and r.summary()["loss_allowed"]
    assert "loss allowed: 1 acknowledged messages lost, 1 of their offsets taken" in report(r)
    strict = check(_async_failover())
    assert not strict.valid and [p.split(":")[0] for p in strict.problems()] == ["1 lost", "1 inconsistent"]


def test_loss_allowed_still_fails_two_reads_disagreeing_about_an_offset():
    h = _async_failover()
    h.reads.append(read("intruder", 1, 3, consumer="c2", session="x"))  # two reads, two keys, one offset
    r = check(h, loss_allowed=True)
    assert r.loss_shadows == [] and not r.valid
    assert [p.split(":")[0] for p in r.problems()] == ["1 inconsistent"]


def test_an_unordered_consumer_is_not_checked_for_offset_order():
    h = clean()
    h.reads.append(read("k0", 0, 0))  # back to offset 0 in the same "session": a POP consumer's redelivery
    r = check(h, ordered=False)
    assert r.valid and r.nonmonotonic == [] and r.poll_skips == [] and r.redeliveries == 1


def test_grpc_consumer_lines_take_the_queue_from_the_receipt_handle():
    from e2e.chaos.workload import grpc_reads
    from ferrymq.broker.pop.receipt import Receipt

    handle = Receipt(queue_id=1, queue_offset=3, commit_log_offset=99, attempt=1, seq=1, invisible_until_ms=0,
                     broker_name=B).encode("G", "T")
    line = {"op": "recv", "key": "k3", "digest": "d-k3", "broker": B, "queue": -1, "offset": 3, "t": 100_000,
            "consumer": "g-1", "session": "pop", "reconsume": 0, "handle": handle}
    other = dict(line, handle=Receipt(1, 3, 99, 1, 1, 0, B).encode("another-group", "T"))
    h = parse_lines(grpc_reads([json.dumps(line), json.dumps(other), '{"op": "meta"}', "{cut"], "G", "T"))
    assert [(r.queue, r.offset) for r in h.reads] == [(1, 3), (-1, 3)]  # a handle of another group: not ours
    assert h.skipped_lines == 1 and len(h.meta) == 1
