"""Dataclasses that travel as RocketMQ JSON bodies.

RocketMQ bodies are Java beans serialized by fastjson: camelCase field names, enums as
names, unknown fields ignored. :class:`JsonModel` gives a dataclass ``to_dict`` /
``from_dict`` that follow those rules, so each body type is declared once as a plain
dataclass. A field whose Java name is not the camelCase of its Python name declares it
with ``field(metadata={"json": "clientID"})``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import functools
import types
import typing
from typing import Any, Self

from ferrymq.common import rocketmq_json
from ferrymq.common.naming import camel_case


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, f.metadata.get("json", camel_case(f.name)), hints[f.name])
        for f in dataclasses.fields(cls)
        if not f.metadata.get("transient")
    )


def _to_plain(value: Any) -> Any:
    if isinstance(value, JsonModel):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {_to_plain_key(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)) and not isinstance(value, rocketmq_json.ObjectKey):
        items = [_to_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    return value


def _to_plain_key(key: Any) -> Any:
    if isinstance(key, JsonModel):
        return rocketmq_json.ObjectKey(key.to_dict())
    return key


def _from_plain(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _from_plain(inner[0], value) if inner else value
    if isinstance(tp, type) and issubclass(tp, JsonModel):
        return tp.from_dict(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp[value] if isinstance(value, str) else tp(value)
    if origin in (list, tuple):
        return [_from_plain(args[0] if args else Any, v) for v in value]
    if origin in (set, frozenset):
        return {_from_plain(args[0] if args else Any, v) for v in value}
    if origin is dict:
        key_tp, val_tp = args if args else (Any, Any)
        return {_key_from_plain(key_tp, k): _from_plain(val_tp, v) for k, v in value.items()}
    if tp is int and isinstance(value, str):
        return int(value)
    if tp is bool and isinstance(value, str):
        return value.lower() == "true"
    if tp is float and isinstance(value, (int, str)):
        return float(value)
    return value


def _key_from_plain(tp: Any, key: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, JsonModel):
        if isinstance(key, str):  # fastjson also accepts the object's JSON as a string key
            key = rocketmq_json.loads(key)
        return tp.from_dict(dict(key))
    if tp is int and not isinstance(key, int):
        return int(key)
    return key


def _standard_keys(value: Any) -> Any:
    """Quote every map key (object keys become their JSON text), for standard-JSON peers."""
    if isinstance(value, dict):
        return {
            (rocketmq_json.dumps(k.as_dict()) if isinstance(k, rocketmq_json.ObjectKey) else str(k)): _standard_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_standard_keys(v) for v in value]
    return value


class JsonModel:
    """Mixin for dataclasses: fastjson-compatible ``to_dict``/``from_dict``/``to_json``."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, json_name, _ in _fields(type(self)):
            value = getattr(self, name)
            if value is not None:  # fastjson omits null fields
                out[json_name] = _to_plain(value)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__} must be a JSON object, not {type(data).__name__}")
        kwargs = {}
        for name, json_name, tp in _fields(cls):
            if json_name in data:
                kwargs[name] = _from_plain(tp, data[json_name])
        return cls(**kwargs)

    def to_json(self, *, indent: int | None = None, standard: bool = False) -> bytes:
        """fastjson form (raw non-string map keys) unless ``standard`` asks for quoted keys."""
        if standard:
            return json.dumps(_standard_keys(self.to_dict()), sort_keys=True, ensure_ascii=False,
                              separators=(",", ":")).encode("utf-8")
        return rocketmq_json.dumps(self.to_dict(), indent=indent).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes | str) -> Self:
        """The model a peer's JSON describes; ValueError for anything that does not fit it
        (wrong shapes and types included), so callers handle one error for bad bodies."""
        data = rocketmq_json.loads(raw)
        try:
            return cls.from_dict(data)
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{cls.__name__}: {type(exc).__name__}: {exc}") from None
