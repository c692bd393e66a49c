"""RocketMQ's Validators: which topic and group names are legal, with Java's wording."""

from __future__ import annotations

import functools
import re

from ferrymq.common.message import MAX_GROUP_LENGTH, MAX_TOPIC_LENGTH

_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
VALID_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"


def _validate_name(kind: str, name: str, max_len: int) -> str | None:
    if not name or not name.strip():
        return f"The specified {kind} is blank."
    if not _VALID_NAME.fullmatch(name):
        return f"The specified {kind}[{name}] contains illegal characters, allowing only {VALID_NAME_PATTERN}"
    if len(name) > max_len:
        return f"The specified {kind} is longer than {kind} max length {max_len}."
    return None


def validate_topic(name: str) -> str | None:
    """None if ``name`` is a legal topic, else the error text (Java Validators wording)."""
    return _validate_name("topic", name, MAX_TOPIC_LENGTH)


# validate_topic for every send, remembered: a broker sees few topic names, over and over. Bounded,
# so a client inventing names costs evictions, not memory.
topic_error = functools.lru_cache(maxsize=4096)(validate_topic)


def validate_group(name: str) -> str | None:
    """None if ``name`` is a legal consumer/producer group, else the error text."""
    return _validate_name("group", name, MAX_GROUP_LENGTH)
