import datetime
import os
import threading
import time

import pytest

from ferrymq.common.message_id import UniqKeyGenerator, decode_offset_msg_id, new_uniq_key, offset_msg_id


def test_offset_msg_id_ipv4_layout():
    # 10.0.0.1 | port 10911 (0x2A9F) | offset 0x1D1E2
    assert offset_msg_id("10.0.0.1", 10911, 0x1D1E2) == "0A000001" "00002A9F" "000000000001D1E2"


def test_offset_msg_id_ipv6_layout_and_round_trip():
    msg_id = offset_msg_id("2001:db8::1", 10911, 1073741824)
    assert len(msg_id) == 56
    assert msg_id == "20010DB8000000000000000000000001" "00002A9F" "0000000040000000"
    assert decode_offset_msg_id(msg_id) == ("2001:db8::1", 10911, 1073741824)


@pytest.mark.parametrize("offset", [0, 1, 2**31, 2**63 - 1])
def test_round_trip_ipv4(offset):
    assert decode_offset_msg_id(offset_msg_id("192.168.1.20", 10911, offset)) == ("192.168.1.20", 10911, offset)


def test_decode_accepts_lowercase():
    assert decode_offset_msg_id("0a00000100002a9f000000000001d1e2") == ("10.0.0.1", 10911, 0x1D1E2)


@pytest.mark.parametrize("bad", ["", "0A00", "0A000001" "00002A9F" "000000000001D1E", "ZZ000001" "00002A9F" "000000000001D1E2", "0" * 40])
def test_decode_rejects_bad_ids(bad):
    with pytest.raises(ValueError):
        decode_offset_msg_id(bad)


def test_encode_rejects_hostnames_and_negative_offsets():
    with pytest.raises(ValueError):
        offset_msg_id("broker-a.local", 10911, 0)
    with pytest.raises(ValueError):
        offset_msg_id("10.0.0.1", 10911, -1)


def _month_start_ms() -> int:
    now = datetime.datetime.now()
    return int(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


def test_uniq_key_layout():
    gen = UniqKeyGenerator(ip=bytes([10, 1, 2, 3]), pid=0x12345, salt=0xCAFEBABE)
    before = int(time.time() * 1000) - _month_start_ms()
    key = gen.new_key()
    after = int(time.time() * 1000) - _month_start_ms()
    assert len(key) == 32 and key == key.upper()
    raw = bytes.fromhex(key)
    assert raw[:4] == bytes([10, 1, 2, 3])
    assert raw[4:6] == (0x2345).to_bytes(2, "big")  # pid cast to a short, as Java does
    assert raw[6:10] == (0xCAFEBABE).to_bytes(4, "big")
    assert before <= int.from_bytes(raw[10:14], "big") <= after
    assert raw[14:16] == b"\x00\x00"  # the counter starts at 0
    assert bytes.fromhex(gen.new_key())[14:16] == b"\x00\x01"


def test_uniq_keys_are_unique_across_threads():
    gen = UniqKeyGenerator()
    keys: list[str] = []
    lock = threading.Lock()

    def work():
        mine = [gen.new_key() for _ in range(5000)]
        with lock:
            keys.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == len(keys) == 20000


def test_default_generator():
    a, b = new_uniq_key(), new_uniq_key()
    assert a != b and len(a) == 32
    assert bytes.fromhex(a)[4:6] == (os.getpid() & 0xFFFF).to_bytes(2, "big")
