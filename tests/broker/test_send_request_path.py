"""The per-request steps of a send that stand in for a general one (unit): a header's answer
fields built directly (``text_of``) against ``to_header_map(fields_of(...))``, and the
look for timers and WAIT in a batch at its messages' properties, not in its encoded body."""

from __future__ import annotations

import itertools

from ferrymq.broker.batch_timers import SPLIT_PROPS
from ferrymq.common.message import Message, Prop, batch_messages, encode_batch_body, py_batch_messages
from ferrymq.remoting.command import RemotingCommand, encode_frame
from ferrymq.remoting.header_fields import to_header_map
from ferrymq.remoting.headers import SendMessageResponseHeader
from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header


def test_answer_fields_are_the_response_headers_java_text() -> None:
    cases = itertools.product(("7F00000100002A9F0000000000000000", "A,B,C", ""), (0, 7, 2**31 - 1),
                              (0, 123456, 2**63 - 1), ("DefaultRegion", "", None), (True, False),
                              (None, "aGFuZGxl"))
    for msg_id, queue_id, queue_offset, region, trace_on, recall_handle in cases:
        expected = to_header_map(SendMessageResponseHeader.fields_of(
            msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset, region=region, trace_on=trace_on,
            recall_handle=recall_handle))
        got = SendMessageResponseHeader.text_of(msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset,
                                                region=region, trace_on=trace_on, recall_handle=recall_handle)
        assert got == expected and list(got) == list(expected)  # the same keys in the same order


def _all_headers(cls=Header):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_headers(sub)


def test_every_headers_text_of_is_its_fields_java_text() -> None:
    samples = {INT: (7, -1, True), LONG: (2**40, 0), BOOL: (True, False)}
    headers = [h for h in _all_headers() if h.SPEC]
    assert len(headers) > 20
    for cls in headers:
        for round_ in range(3):
            values = {}
            for attr, (_, kind, _, required) in zip(cls.ATTRS, cls.SPEC):
                options = (*samples.get(kind, ("text", "")), None)
                values[attr] = options[(round_ + len(values)) % len(options)]
                if required and values[attr] is None:
                    values[attr] = options[0]
            expected = to_header_map(cls.fields_of(**values))
            got = cls.text_of(**values)
            assert got == expected and list(got) == list(expected), cls.__name__


def test_a_text_response_is_the_response_with_those_fields() -> None:
    request = RemotingCommand.request(320, {"b": "T"})
    request.opaque = 77
    fields = SendMessageResponseHeader.text_of(msg_id="ID", queue_id=3, queue_offset=9, region="DefaultRegion",
                                               trace_on=True, recall_handle=None)
    direct = request.text_response(0, fields)
    general = request.response(0, ext_fields=fields)
    assert direct == general and type(direct.code) is int
    assert encode_frame(direct) == encode_frame(general)


def screen(*props: dict[str, str], body: bytes = b"x" * 64, extra: dict[str, str] | None = None) -> tuple[bool, bool]:
    """What the send path learns of a batch before storing it: (a message names a timer or a
    delay level, every message waits), from both versions of ``batch_messages``."""
    encoded = encode_batch_body([Message("T", body, properties=dict(p)) for p in props])
    outcomes = {f(*("T", encoded, dict(extra or {}), SPLIT_PROPS, 0, 0, 1, ("10.0.0.1", 1), ("10.0.0.2", 2), 0))[1:]
                for f in (batch_messages, py_batch_messages)}
    assert len(outcomes) == 1
    return outcomes.pop()


def test_a_batch_may_carry_timers_when_a_message_or_the_batch_names_one() -> None:
    for name in (Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, Prop.TIMER_DELIVER_MS, Prop.DELAY):
        assert screen({"KEYS": "k"}, {name: "5"})[0]
        assert screen({}, extra={name: "5"})[0]


def test_a_batch_without_them_does_not_whatever_its_bodies_say() -> None:
    assert not screen({}, {"KEYS": "k", "TAGS": "a"})[0]
    assert not screen({}, body=b"TIMER_DELAY_SEC\x015\x02DELAY\x013\x02")[0]
    assert not screen({"TIMER_DELAYED": "no"}, extra={"CLUSTER": "c"})[0]


def test_one_message_saying_wait_false_answers_the_batch_at_once() -> None:
    assert screen({}, {"KEYS": "k"}) == (False, True)
    assert screen({}, {Prop.WAIT: "false"}, {}) == (False, False)
    assert screen({Prop.WAIT: "true"}, {Prop.WAIT: "no"}) == (False, True)
