"""SendMessage's answer written by hand (grpc/send_response.py) is the protobuf a client parses:
byte for byte what upb serializes for the same fields."""

import random

import pytest

from ferrymq.grpc.protocol import Code, spb, status
from ferrymq.grpc.send_response import SentEntry, refused, send_response, stored


def _upb(entries: list[SentEntry]) -> bytes:
    """The same answer built as upb messages, as SendMessage built it before."""
    built = []
    for e in entries:
        entry = spb.SendResultEntry(status=status(e.code, e.message), message_id=e.message_id, offset=e.offset,
                                    transaction_id=e.transaction_id, recall_handle=e.recall_handle)
        built.append(entry)
    failed = next((b.status for b in built if b.status.code != Code.OK), None)
    return spb.SendMessageResponse(status=failed or status(), entries=built).SerializeToString()


def test_one_stored_message():
    entry = stored("01AC1100020000000000000000000001", 4711)
    answer = send_response([entry])
    assert answer == _upb([entry])
    parsed = spb.SendMessageResponse.FromString(answer)
    assert (parsed.status.code, parsed.status.message) == (Code.OK, "OK")
    assert parsed.entries[0].message_id == "01AC1100020000000000000000000001"
    assert parsed.entries[0].offset == 4711


@pytest.mark.parametrize("entries", [
    [stored("id-at-zero", 0)],  # offset 0: proto3 leaves it out
    [stored("tx", 12, transaction_id="MTIzNDU2Nzg5MA==", recall_handle="dGltZXI=")],
    [refused(Code.MESSAGE_BODY_EMPTY)],  # the code's name as its message
    [refused(Code.ILLEGAL_MESSAGE_TAG, "tag 'a||b' may not contain '||'")],
    [stored("a", 1), refused(Code.TOPIC_NOT_FOUND, "topic[t] not exist"), stored("c", 3)],  # the first failure leads
    [stored("ünïcode-id", 2**40), stored("neg", -1)],  # multi-byte UTF-8, long and negative varints
])
def test_answers_match_upb(entries):
    assert send_response(entries) == _upb(entries)


def test_random_answers_match_upb():
    rnd = random.Random(33)
    codes = [c for c in (Code.OK, Code.BAD_REQUEST, Code.INTERNAL_ERROR, Code.MESSAGE_CORRUPTED,
                         Code.MESSAGE_PROPERTIES_TOO_LARGE, Code.TOO_MANY_REQUESTS)]
    for _ in range(300):
        entries = []
        for _ in range(rnd.randint(1, 4)):
            code = rnd.choice(codes)
            text = "".join(rnd.choice("ab-é✓ ") for _ in range(rnd.randint(0, 200)))
            if code == Code.OK:
                entries.append(stored(text, rnd.choice([0, 1, 127, 128, 2**31, 2**63 - 1]),
                                      rnd.choice(["", text[:10]]), rnd.choice(["", text[-5:]])))
            else:
                entries.append(refused(code, rnd.choice(["", text])))
        assert send_response(entries) == _upb(entries)
