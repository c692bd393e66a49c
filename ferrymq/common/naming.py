"""Name conversions between RocketMQ's Java (camelCase) and our Python (snake_case) names."""

import re

_UPPER = re.compile(r"(?<=[a-z0-9])([A-Z])")


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake_case(name: str) -> str:
    return _UPPER.sub(r"_\1", name).lower()
