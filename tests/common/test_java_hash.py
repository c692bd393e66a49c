import random

import pytest

from ferrymq.common.java_hash import java_string_hash


def reference_hash(s: str) -> int:
    """Java's definition, spelled out: s[0]*31^(n-1) + ... over UTF-16 units, as int32."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = h * 31 + int.from_bytes(units[i : i + 2], "big")
    h %= 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("TagA", 2598919),
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision pair
        ("BB", 2112),
        ("polygenelubricants", -2147483648),  # hashes to Integer.MIN_VALUE
        ("é", 233),
        ("中文", 646394),  # 20013 * 31 + 25991
        ("😀", 1772899),  # U+1F600 = surrogates D83D DE00: 55357 * 31 + 56832
        ("a😀", (97 * 31 * 31 + 55357 * 31 + 56832)),
    ],
)
def test_known_values(text, expected):
    assert java_string_hash(text) == expected


def test_negative_results_are_signed_int32():
    value = java_string_hash("TagA TagB || TagC")
    assert -(2**31) <= value < 2**31
    assert value == reference_hash("TagA TagB || TagC")


def test_matches_reference_on_random_strings():
    rng = random.Random(7)
    alphabet = "abcXYZ019_-|% éü中文𝄞😀"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert java_string_hash(text) == reference_hash(text), text


def test_long_index_keys_with_shared_prefixes_match_the_reference():
    """topic#UNIQ_KEY keys take the cached-prefix path: shared and unshared prefixes, every length
    around the switch-over, and non-ASCII keys (which do not)."""
    rng = random.Random(11)
    prefixes = ["orders#0A0000012F3C", "t#", "x" * 30, "BenchTopic#7F0000010D2A1B2C3D4E"]
    for _ in range(3000):
        tail = "".join(rng.choice("0123456789ABCDEF") for _ in range(rng.randrange(0, 20)))
        text = rng.choice(prefixes) + tail
        assert java_string_hash(text) == reference_hash(text), text
    for text in ("é" * 30, "topic#" + "中" * 25, "a" * 23, "a" * 24, "a" * 25):
        assert java_string_hash(text) == reference_hash(text), text
