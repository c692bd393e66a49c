"""The one configuration loader: RocketMQ-style ``broker.conf`` files and ``--set key=value``.

Keys use RocketMQ's camelCase names (``flushDiskType``, ``mappedFileSizeCommitLog``...);
they are applied to snake_case dataclass fields (``flush_disk_type``...). A key may belong
to any of several dataclasses (the broker's and the store's settings share one file, as in
RocketMQ). Values are converted to the field's type; an unknown key or a bad value is a
:class:`ConfigError` with one clear line.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping

from ferrymq.common.naming import camel_case, snake_case

__all__ = ["ConfigError", "parse_properties", "parse_assignments", "apply_settings", "to_properties"]


class ConfigError(ValueError):
    pass


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``key=value`` or ``key: value``; ``#``/``!`` comments)."""
    result: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"line {lineno}: expected key=value, got {raw!r}")
        result[m.group(1)] = m.group(2).strip()
    return result


def load_properties_file(path: str | Path) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}`` (from repeated ``--set``)."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _convert(tp: Any, raw: str, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner[0], raw, key) if raw.lower() not in ("", "null", "none") else None
    try:
        if tp is bool:
            lowered = raw.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError
            return lowered == "true"
        if tp is int:
            return int(raw.strip())
        if tp is float:
            return float(raw.strip())
    except ValueError:
        raise ConfigError(f"{key}: {raw!r} is not a valid {tp.__name__}") from None
    return raw


def apply_settings(settings: Mapping[str, str], *targets: Any, ignore_unknown: bool = False) -> None:
    """Set each ``camelCaseKey=value`` on the first target dataclass that has the field."""
    for key, raw in settings.items():
        name = snake_case(key)
        for target in targets:
            hints = typing.get_type_hints(type(target))
            if name in hints and any(f.name == name for f in dataclasses.fields(target)):
                setattr(target, name, _convert(hints[name], raw, key))
                break
        else:
            if not ignore_unknown:
                raise ConfigError(f"unknown configuration key {key!r}")


def to_properties(*targets: Any) -> dict[str, str]:
    """All fields of the targets as RocketMQ ``camelCase -> str`` (GET_BROKER_CONFIG, logs)."""
    out = {}
    for target in targets:
        for f in dataclasses.fields(target):
            if f.name.startswith("_"):
                continue
            value = getattr(target, f.name)
            out[camel_case(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out
