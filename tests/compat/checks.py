"""Assertions shared by the compat tests against Apache RocketMQ and against FerryMQ."""

from __future__ import annotations

import re
from collections import defaultdict

from testkit.java_client import JavaEvents

COUNT = 20
MODES = ("sync", "async", "oneway")


def check_produce_consume(topic: str, events: JavaEvents, count: int = COUNT, modes=MODES, key_prefix: str = "ref") -> None:
    """Every send acknowledged, every key received byte-for-byte, offsets dense per queue."""
    done = events.done
    assert done is not None and done["ok"], done
    assert done["sent"] == {m: count for m in modes}
    assert done["sendFailures"] == 0 and done["missing"] == []
    assert not events.of("send_failed") and not events.of("error")

    sent = {e["key"]: e for e in events.of("sent")}
    assert set(sent) == {f"{key_prefix}-{m}-{i}" for m in modes for i in range(count)}
    for e in sent.values():
        assert re.fullmatch(r"[0-9A-F]{32,}", e["msgId"]), e
        if e["mode"] == "oneway":
            continue  # no acknowledgement: only the client-side unique id is known
        assert e["sendStatus"] == "SEND_OK", e
        assert re.fullmatch(r"[0-9A-F]{32}", e["offsetMsgId"]), e
        assert e["queueId"] >= 0 and e["queueOffset"] >= 0, e

    received = events.of("received")
    by_key = {e["key"]: e for e in received}
    assert set(by_key) == set(sent), "every sent key (oneway included) must arrive"
    for key, r in by_key.items():
        mode, seq = key.split("-")[1], int(key.split("-")[2])
        s = sent[key]
        assert r["topic"] == topic
        assert r["tags"] == "TagA"
        assert r["body"] == f"ferrymq compat {mode} #{seq}"
        assert r["props"]["ferry_mode"] == mode and r["props"]["ferry_seq"] == str(seq)
        assert r["props"]["KEYS"] == key and r["props"]["TAGS"] == "TagA"
        assert r["msgId"] == r["props"]["UNIQ_KEY"] == s["msgId"]
        assert r["reconsumeTimes"] == 0
        if mode != "oneway":
            assert (r["queueId"], r["queueOffset"]) == (s["queueId"], s["queueOffset"])
            assert r["offsetMsgId"] == s["offsetMsgId"]

    # Each queue's offsets are dense from 0: nothing lost or skipped inside the broker.
    offsets = defaultdict(set)
    for r in by_key.values():
        offsets[r["queueId"]].add(r["queueOffset"])
    for qid, got in offsets.items():
        assert got == set(range(len(got))), (qid, sorted(got))
