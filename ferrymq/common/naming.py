"""Name conversions between RocketMQ's Java (camelCase) and our Python (snake_case) names."""

import re

_ACRONYM_RUN = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_START = re.compile(r"([a-z0-9])([A-Z])")
# Parts RocketMQ writes in capitals (checkCRCOnRecover, brokerIP1).
_ACRONYMS = {"crc": "CRC", "ip1": "IP1", "ip2": "IP2", "id": "Id"}


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(_ACRONYMS.get(part, part[:1].upper() + part[1:]) for part in rest)


def snake_case(name: str) -> str:
    return _WORD_START.sub(r"\1_\2", _ACRONYM_RUN.sub(r"\1_\2", name)).lower()
