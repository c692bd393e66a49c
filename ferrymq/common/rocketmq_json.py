"""JSON as RocketMQ's Java peers write and read it (fastjson 1.2.69 flavour).

Java brokers and name servers write maps with non-string keys raw: ``{0:"addr"}`` for a
``Map<Long, String>`` and ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`` for a
``Map<MessageQueue, X>``. The standard library parser rejects both, so :func:`loads`
is a small tolerant parser that accepts numbers and objects in key position (object keys
come back as :class:`ObjectKey`, hashable and ordered), and :func:`dumps` writes the same
forms back when asked to (int keys raw, ObjectKey keys as objects).

Everything else is ordinary JSON; for payloads without such keys both functions defer to
the standard ``json`` module, which is much faster.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ObjectKey", "dumps", "loads", "JSONDecodeError"]

JSONDecodeError = json.JSONDecodeError


class ObjectKey(tuple):
    """A JSON object used as a map key (fastjson writes ``Map<MessageQueue, X>`` this way).

    Stored as a sorted tuple of (name, value) pairs so it is hashable and compares equal
    regardless of field order.
    """

    def __new__(cls, fields: dict[str, Any]) -> "ObjectKey":
        return super().__new__(cls, tuple(sorted(fields.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


# --------------------------------------------------------------------------- writing


def dumps(obj: Any, *, sort_keys: bool = True, indent: int | None = None) -> str:
    """Serialize like fastjson: alphabetical keys, int keys raw, ObjectKey keys as objects."""
    if not _has_special_keys(obj):
        separators = (",", ":") if indent is None else (",", ": ")
        return json.dumps(obj, sort_keys=sort_keys, ensure_ascii=False, separators=separators, indent=indent)
    parts: list[str] = []
    _write(obj, parts, sort_keys)
    return "".join(parts)


def _has_special_keys(obj: Any) -> bool:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str) or _has_special_keys(v):
                return True
        return False
    if isinstance(obj, (list, tuple)) and not isinstance(obj, ObjectKey):
        return any(_has_special_keys(v) for v in obj)
    return False


def _key_order(item: tuple[Any, Any]) -> tuple[int, Any]:
    key = item[0]
    if isinstance(key, bool):
        return (1, str(key))
    if isinstance(key, int):
        return (0, key)
    return (1, str(key))


def _write(obj: Any, out: list[str], sort_keys: bool) -> None:
    if isinstance(obj, ObjectKey):
        _write(obj.as_dict(), out, sort_keys)
    elif isinstance(obj, dict):
        items = sorted(obj.items(), key=_key_order) if sort_keys else list(obj.items())
        out.append("{")
        for i, (k, v) in enumerate(items):
            if i:
                out.append(",")
            if isinstance(k, bool) or not isinstance(k, (int, float, ObjectKey)):
                out.append(json.dumps(str(k), ensure_ascii=False))
            elif isinstance(k, (int, float)):
                out.append(repr(k))  # fastjson writes number keys raw, Double keys included
            else:
                _write(k, out, sort_keys)
            out.append(":")
            _write(v, out, sort_keys)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _write(v, out, sort_keys)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


# --------------------------------------------------------------------------- reading

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_BARE_WORD = re.compile(r"[A-Za-z_$][\w$]*")


def _finite(literal: str) -> float:
    value = float(literal)
    if value in (_INF, -_INF):
        raise ValueError(f"number out of range: {literal[:40]}")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")  # Python's json takes NaN/Infinity; RocketMQ's peers never write them


_INF = float("inf")
_decoder = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


def loads(text: str | bytes) -> Any:
    """Parse JSON that may have number or object keys (and fastjson's unquoted names)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    try:
        return _decoder.decode(text)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise JSONDecodeError("nested deeper than the interpreter can parse", text, 0) from None
    except ValueError as exc:  # NaN, Infinity, a number beyond a double or past int's digit limit
        raise JSONDecodeError(str(exc), text, 0) from None
    value, pos = _Parser(text).parse_value(_skip(text, 0))
    pos = _skip(text, pos)
    if pos != len(text):
        raise JSONDecodeError("extra data", text, pos)
    return value


def _skip(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()


class _Parser:
    MAX_DEPTH = 100  # RocketMQ's bodies nest four or five levels; this bounds the recursion

    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def _nested(self, parse, pos: int) -> tuple[Any, int]:
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            raise JSONDecodeError(f"nested deeper than {self.MAX_DEPTH} levels", self.text, pos)
        try:
            return parse(pos)
        finally:
            self.depth -= 1

    def parse_value(self, pos: int) -> tuple[Any, int]:
        text = self.text
        if pos >= len(text):
            raise JSONDecodeError("unexpected end", text, pos)
        ch = text[pos]
        if ch == "{":
            return self._nested(self.parse_object, pos + 1)
        if ch == "[":
            return self._nested(self.parse_array, pos + 1)
        if ch == "'":
            return self.parse_single_quoted(pos + 1)
        # strings, numbers, true/false/null: the standard scanner handles them
        try:
            return _decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            raise
        except ValueError as exc:  # NaN, Infinity, a number beyond a double or past int's digit limit
            raise JSONDecodeError(str(exc), text, pos) from None

    def parse_single_quoted(self, pos: int) -> tuple[str, int]:
        end = self.text.find("'", pos)
        if end < 0:
            raise JSONDecodeError("unterminated string", self.text, pos)
        return self.text[pos:end], end + 1

    def parse_key(self, pos: int) -> tuple[Any, int]:
        text = self.text
        if pos >= len(text):
            raise JSONDecodeError("unexpected end", text, pos)
        ch = text[pos]
        if ch == "{":
            start = pos
            obj, pos = self._nested(self.parse_object, pos + 1)
            if not all(isinstance(k, str) and not isinstance(v, (dict, list)) for k, v in obj.items()):
                # fastjson writes objects as keys only for flat beans such as MessageQueue
                raise JSONDecodeError("an object used as a key must be flat", text, start)
            return ObjectKey(obj), pos
        if ch == '"' or ch == "'":
            return self.parse_value(pos)
        m = _NUMBER.match(text, pos)
        if m:
            literal = m.group()
            try:
                value = _finite(literal) if any(c in literal for c in ".eE") else int(literal)
            except ValueError as exc:
                raise JSONDecodeError(str(exc), text, pos) from None
            return value, m.end()
        m = _BARE_WORD.match(text, pos)
        if m:
            return m.group(), m.end()
        raise JSONDecodeError("bad object key", text, pos)

    def parse_object(self, pos: int) -> tuple[dict, int]:
        text = self.text
        result: dict[Any, Any] = {}
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == "}":
            return result, pos + 1
        while True:
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == "}":  # trailing comma
                return result, pos + 1
            key, pos = self.parse_key(pos)
            pos = _skip(text, pos)
            if pos >= len(text) or text[pos] != ":":
                raise JSONDecodeError("expected ':'", text, pos)
            value, pos = self.parse_value(_skip(text, pos + 1))
            result[key] = value
            pos = _skip(text, pos)
            if pos >= len(text):
                raise JSONDecodeError("unterminated object", text, pos)
            if text[pos] == ",":
                pos += 1
                continue
            if text[pos] == "}":
                return result, pos + 1
            raise JSONDecodeError("expected ',' or '}'", text, pos)

    def parse_array(self, pos: int) -> tuple[list, int]:
        text = self.text
        result: list[Any] = []
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == "]":
            return result, pos + 1
        while True:
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == "]":
                return result, pos + 1
            value, pos = self.parse_value(pos)
            result.append(value)
            pos = _skip(text, pos)
            if pos >= len(text):
                raise JSONDecodeError("unterminated array", text, pos)
            if text[pos] == ",":
                pos += 1
                continue
            if text[pos] == "]":
                return result, pos + 1
            raise JSONDecodeError("expected ',' or ']'", text, pos)
