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
from typing import Any, Collection, Iterable, Mapping

from ferrymq.common.naming import camel_case, snake_case

__all__ = ["ConfigError", "LIVE", "SECRET", "parse_properties", "parse_assignments", "apply_settings", "check_range",
           "live_keys", "to_properties"]


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


LIVE = {"live": True}
SECRET = {"secret": True}  # shown as "***" by to_properties (GET_BROKER_CONFIG, logs) when set
"""Field metadata of a setting a running broker may change (UPDATE_BROKER_CONFIG): one that
is read where it is used, not copied into some object at start."""


def apply_settings(settings: Mapping[str, str], *targets: Any, ignore_unknown: bool = False,
                   live_only: bool = False, unimplemented: Collection[str] = ()) -> dict[str, str]:
    """Set each ``camelCaseKey=value`` on the first target dataclass that has the field.

    Each changed target is rebuilt through its constructor (``dataclasses.replace``), so its
    ``__post_init__`` validation sees the new values; only when every target is valid are the
    values copied onto the targets: a rejected update changes nothing. With ``live_only``,
    a key whose field is not marked :data:`LIVE` is refused, naming the key. Keys in
    ``unimplemented`` (known to RocketMQ, not to us) are skipped and returned.
    """
    skipped: dict[str, str] = {}
    changes: list[dict[str, Any]] = [{} for _ in targets]
    for key, raw in settings.items():
        name = snake_case(key)
        for i, target in enumerate(targets):
            field = _settable_field(target, name)
            if field is None:
                continue
            if live_only and not field.metadata.get("live"):
                raise ConfigError(f"{key} cannot change on a running broker: set it in broker.conf and restart "
                                  f"(keys that change live: {', '.join(live_keys(*targets))})")
            changes[i][name] = _convert(typing.get_type_hints(type(target))[name], raw, key)
            break
        else:
            if key in unimplemented:
                skipped[key] = raw
            elif not ignore_unknown:
                raise ConfigError(f"unknown configuration key {key!r}")
    rebuilt = []
    for target, change in zip(targets, changes):
        if change:
            try:
                rebuilt.append((target, dataclasses.replace(target, **change)))
            except ConfigError:
                raise
            except (ValueError, TypeError) as e:
                raise ConfigError(str(e)) from None
    for target, valid in rebuilt:
        for f in dataclasses.fields(target):
            setattr(target, f.name, getattr(valid, f.name))
    return skipped


def check_range(config: Any, name: str, lo: int, hi: int | None = None) -> None:
    """Raise ValueError naming the RocketMQ key unless ``lo <= config.name (<= hi)``."""
    value = getattr(config, name)
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"{camel_case(name)} must be {bound}, got {value}")


def live_keys(*targets: Any) -> list[str]:
    """The RocketMQ keys of the targets' :data:`LIVE` fields, sorted."""
    return sorted(camel_case(f.name) for t in targets for f in dataclasses.fields(t) if f.metadata.get("live"))


def _settable_field(target: Any, name: str) -> dataclasses.Field | None:
    for f in dataclasses.fields(target):
        if f.name == name and f.init:
            return f
    return None


def to_properties(*targets: Any) -> dict[str, str]:
    """All fields of the targets as RocketMQ ``camelCase -> str`` (GET_BROKER_CONFIG, logs)."""
    out = {}
    for target in targets:
        for f in dataclasses.fields(target):
            if f.name.startswith("_"):
                continue
            value = getattr(target, f.name)
            if f.metadata.get("secret") and value:
                value = "***"
            out[camel_case(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out
