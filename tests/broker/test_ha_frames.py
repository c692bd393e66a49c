"""The HA frame codec (RocketMQ 4.x HAService) against byte vectors worked out by hand
from the protocol: 8-byte big-endian offset reports, 12-byte transfer headers."""

import pytest

from ferrymq.broker.ha.frames import (
    HAFrameError,
    TransferHeader,
    decode_offset_report,
    decode_transfer_header,
    encode_offset_report,
    encode_transfer,
)


@pytest.mark.parametrize("offset, wire", [
    (0, bytes(8)),  # a new slave: start at the master's last CommitLog file
    (0x0102030405060708, bytes([1, 2, 3, 4, 5, 6, 7, 8])),
    (1 << 30, bytes([0, 0, 0, 0, 0x40, 0, 0, 0])),  # the second 1 GiB CommitLog file
    ((1 << 63) - 1, bytes([0x7F] + [0xFF] * 7)),
])
def test_offset_report_is_an_8_byte_big_endian_long(offset, wire):
    assert encode_offset_report(offset) == wire
    assert decode_offset_report(wire) == offset


def test_transfer_is_a_12_byte_header_then_the_raw_bytes():
    frame = encode_transfer(1 << 30, b"abc")
    assert frame == bytes([0, 0, 0, 0, 0x40, 0, 0, 0]) + bytes([0, 0, 0, 3]) + b"abc"
    assert decode_transfer_header(frame[:12], 32 * 1024) == TransferHeader(1 << 30, 3)


def test_heartbeat_is_a_header_with_size_zero():
    frame = encode_transfer(0x1234)
    assert frame == bytes([0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0])
    header = decode_transfer_header(frame, 32 * 1024)
    assert header.heartbeat and header.offset == 0x1234


def test_a_full_batch_header():
    assert encode_transfer(7, bytes(32 * 1024))[:12] == bytes([0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0x80, 0])


@pytest.mark.parametrize("wire, message", [
    (b"\xff" * 8, "negative"),
    (b"\x00" * 7, "8 bytes"),
])
def test_bad_offset_reports_are_refused_clearly(wire, message):
    with pytest.raises(HAFrameError, match=message):
        decode_offset_report(wire)


@pytest.mark.parametrize("wire, message", [
    (bytes(8) + b"\xff\xff\xff\xff", "size -1"),
    (b"\xff" * 8 + bytes(4), "offset -1"),
    (bytes(8) + bytes([0, 0x40, 0, 1]), "exceeds"),
    (bytes(11), "12 bytes"),
])
def test_bad_transfer_headers_are_refused_clearly(wire, message):
    with pytest.raises(HAFrameError, match=message):
        decode_transfer_header(wire, 4 * 1024 * 1024)


def test_negative_offsets_cannot_be_encoded():
    with pytest.raises(HAFrameError):
        encode_offset_report(-1)
    with pytest.raises(HAFrameError):
        encode_transfer(-5, b"x")


def test_a_hello_names_the_slave_and_no_offset_report_reads_as_one():
    from ferrymq.broker.ha.frames import HELLO, OFFSET_REPORT, decode_hello_rest, encode_hello, is_hello
    frame = encode_hello(2, 7)
    assert len(frame) == HELLO.size
    assert is_hello(frame[:OFFSET_REPORT.size])
    hello = decode_hello_rest(frame[OFFSET_REPORT.size:])
    assert (hello.identity, hello.epoch) == (2, 7)
    # a 4.x slave's first report (any real CommitLog offset) is never taken for a hello
    for offset in (0, 1, 1 << 40, (1 << 62) - 1):
        assert not is_hello(encode_offset_report(offset))
    with pytest.raises(HAFrameError):
        encode_hello(-1, 0)
    with pytest.raises(HAFrameError):
        decode_hello_rest(frame[OFFSET_REPORT.size:-1])
