"""RocketMQ 4.9's SQL92 message selector (``MessageSelector.bySql``), parsed and evaluated
as its broker does (rocketmq-filter's SelectorParser and expressions), on message properties.

Grammar, loosest binding first::

    or:         and (OR and)*
    and:        equality (AND equality)*
    equality:   comparison (('=' | '<>') comparison | IS [NOT] NULL)*
    comparison: unary (('>' | '>=' | '<' | '<=') unary
                       | [NOT] BETWEEN unary AND unary | [NOT] IN '(' string (',' string)* ')')*
    unary:      ('+' | '-') unary | NOT unary | primary
    primary:    property | 'string' | integer | decimal | TRUE | FALSE | NULL | '(' or ')'

Keywords are case-insensitive, property names are not. Values follow Java's rules: property
values are strings; compared with a number they are parsed as that number's Java type
(``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``), and a value that does not parse
makes the whole evaluation fail, which RocketMQ treats as "no match"; ``>``/``<`` between two
strings compares them as doubles; a missing property makes a comparison unknown (None), and
only a result of True matches. AND and OR short-circuit on a known result, as RocketMQ's do.

Where RocketMQ is lax FerryMQ refuses: input after a complete expression (RocketMQ ignores it,
so ``a = 010`` means ``a = 0`` there) and binary ``+`` are syntax errors here. Every bad input
raises :class:`SqlError` naming the position; nesting and length are bounded.

One module past the usual size on purpose: tokenizer, parser and Java's value rules are the
definition of one small language and share its node and value types; split, each part would
reach into the others.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Mapping

__all__ = ["Selector", "SqlError", "compile_selector"]

MAX_LENGTH = 4096
MAX_DEPTH = 64
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class SqlError(ValueError):
    """The expression is not a selector RocketMQ's SQL92 would accept."""


class _EvalError(Exception):
    """A value could not be converted: the message does not match."""


# ------------------------------------------------------------------ values
# Java's boxed types matter for conversions: a constant is an Integer (fits int32), a Long
# or a Double; property values are Strings.


@dataclass(frozen=True)
class Num:
    value: int | float
    kind: str  # "I" Integer, "L" Long, "D" Double

    def negate(self) -> "Num":
        return Num(-self.value, self.kind)


def _kind(v) -> str:
    if isinstance(v, Num):
        return v.kind
    if isinstance(v, bool):
        return "B"
    return "S"


_INT_TEXT = re.compile(r"[+-]?\d+")
_DOUBLE_TEXT = re.compile(r"[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?")


def _parse_number(text: str, kind: str) -> Num:
    """Java's Integer.valueOf / Long.valueOf / Double.valueOf of a property value."""
    if kind == "D":
        stripped = text.strip("".join(map(chr, range(33))))
        m = _DOUBLE_TEXT.fullmatch(stripped)
        if not m:
            raise _EvalError(f"{text!r} is not a number")
        body = stripped.rstrip("fFdD") if m.group(1) not in ("NaN", "Infinity") else stripped
        return Num(float(body.replace("Infinity", "inf").replace("NaN", "nan")), "D")
    if not _INT_TEXT.fullmatch(text):
        raise _EvalError(f"{text!r} is not an integer")
    value = int(text)
    low, high = (_INT_MIN, _INT_MAX) if kind == "I" else (_LONG_MIN, _LONG_MAX)
    if not low <= value <= high:
        raise _EvalError(f"{text!r} is out of range")
    return Num(value, kind)


def _double_cmp(a: float, b: float) -> int:
    """Double.compareTo: NaN above everything, -0.0 below 0.0."""
    if math.isnan(a) or math.isnan(b):
        return (math.isnan(a) > math.isnan(b)) - (math.isnan(a) < math.isnan(b))
    if a == b == 0.0:
        return (math.copysign(1, a) > math.copysign(1, b)) - (math.copysign(1, a) < math.copysign(1, b))
    return (a > b) - (a < b)


def _num_cmp(a: Num, b: Num) -> int:
    if "D" in (a.kind, b.kind):
        return _double_cmp(float(a.value), float(b.value))
    return (a.value > b.value) - (a.value < b.value)


def _str_cmp(a: str, b: str) -> int:
    if a.isascii() and b.isascii():
        return (a > b) - (a < b)
    ua, ub = a.encode("utf-16-be"), b.encode("utf-16-be")  # Java compares UTF-16 units
    return (ua > ub) - (ua < ub)


def _compare(lv, rv) -> int:
    """RocketMQ's ComparisonExpression.__compare with string conversion on."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        if lk == "B":
            if rk == "S":
                raise _EvalError("a boolean cannot be compared with a string")  # a ClassCastException there
            return -1
        if lk in "ILD":
            if rk in "ILD":
                return _num_cmp(lv, rv)
            if rk == "S":
                return _num_cmp(lv, _parse_number(rv, lk))
            return -1
        # lk == "S"
        if rk == "B":
            return _compare(lv.lower() == "true", rv)
        return _num_cmp(_parse_number(lv, rk), rv)
    if lk in "ILD":
        return _num_cmp(lv, rv)
    if lk == "B":
        return int(lv) - int(rv)
    return _str_cmp(lv, rv)


def _java_equals(lv, rv) -> bool:
    if _kind(lv) != _kind(rv):
        return False
    if isinstance(lv, Num):
        if lv.kind == "D":
            return _double_cmp(lv.value, rv.value) == 0
        return lv.value == rv.value
    return lv == rv


# ------------------------------------------------------------------ expression nodes
# Each node is a function (properties) -> value; booleans evaluate to True/False/None.

Node = Callable[[Mapping[str, str]], object]


@dataclass(frozen=True)
class _Expr:
    node: Node
    constant: bool = False  # a literal: its value is known at compile time
    value: object = None
    boolean: bool = False  # a BooleanExpression in RocketMQ's sense
    prop: str | None = None  # a bare property


def _as_boolean(e: _Expr, pos: int) -> _Expr:
    if e.boolean:
        return e
    if e.prop is not None:  # RocketMQ's boolean cast: only a Boolean value is TRUE
        name = e.prop
        return _Expr(lambda p: None if p.get(name) is None else False, boolean=True)
    raise SqlError(f"the expression at position {pos} does not give a boolean value")


def _comparable(e: _Expr, pos: int) -> None:
    """checkLessThanOperand: a literal compared by >, <, BETWEEN must be a number."""
    if (e.constant and not isinstance(e.value, Num)) or (e.boolean and not e.constant) or (e.constant and e.boolean):
        raise SqlError(f"the value at position {pos} cannot be compared with > or <")


def _ordering(op: str, left: _Expr, right: _Expr) -> _Expr:
    test = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}[op]
    ln, rn = left.node, right.node

    def node(p):
        lv = ln(p)
        if lv is None:
            return None
        rv = rn(p)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            return test(_num_cmp(_parse_number(lv, "D"), _parse_number(rv, "D")))
        return test(_compare(lv, rv))

    return _Expr(node, boolean=True)


def _equal(left: _Expr, right: _Expr) -> _Expr:
    ln, rn = left.node, right.node

    def node(p):
        lv, rv = ln(p), rn(p)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is rv or _java_equals(lv, rv):
            return True
        return _compare(lv, rv) == 0

    return _Expr(node, boolean=True)


def _not(e: _Expr) -> _Expr:
    n = e.node

    def node(p):
        v = n(p)
        return None if v is None else not v

    return _Expr(node, boolean=True)


def _logical(left: _Expr, right: _Expr, decisive: bool) -> _Expr:
    """AND (``decisive`` False) or OR (True) in three-valued logic: a known decisive operand
    ends the evaluation; otherwise unknown if either side is."""
    ln, rn = left.node, right.node

    def node(p):
        lv = ln(p)
        if lv is decisive:
            return decisive
        rv = rn(p)
        if rv is decisive:
            return decisive
        return None if lv is None or rv is None else not decisive

    return _Expr(node, boolean=True)


def _and(left: _Expr, right: _Expr) -> _Expr:
    return _logical(left, right, False)


def _or(left: _Expr, right: _Expr) -> _Expr:
    return _logical(left, right, True)


# ------------------------------------------------------------------ tokens

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/)
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>[1-9]\d*[lL]?|0)
  | (?P<string>'(?:[^']|'')*')
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+\-])
""", re.VERBOSE | re.DOTALL)
_KEYWORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # float, int, string, word, keyword, op, end
    text: str
    pos: int


def _tokenize(sql: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if not m:
            raise SqlError(f"unexpected {sql[pos]!r} at position {pos}")
        kind = m.lastgroup
        if kind != "ws":
            text = m.group()
            if kind == "word" and text.upper() in _KEYWORDS:
                out.append(_Tok("keyword", text.upper(), pos))
            else:
                out.append(_Tok(kind, text, pos))
        pos = m.end()
    out.append(_Tok("end", "", len(sql)))
    return out


# ------------------------------------------------------------------ parser


class _Parser:
    def __init__(self, sql: str) -> None:
        self.toks = _tokenize(sql)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def _is(self, kind: str, text: str | None = None) -> bool:
        t = self.tok
        return t.kind == kind and (text is None or t.text == text)

    def _take(self, kind: str, text: str | None = None) -> _Tok:
        if not self._is(kind, text):
            t = self.tok
            found = "the end" if t.kind == "end" else repr(t.text)
            raise SqlError(f"expected {text or kind} at position {t.pos}, found {found}")
        t = self.tok
        self.i += 1
        return t

    def parse(self) -> _Expr:
        expr = _as_boolean(self.or_(), 0)
        if not self._is("end"):
            raise SqlError(f"unexpected {self.tok.text!r} at position {self.tok.pos} after a complete expression")
        return expr

    def _nested(self, parse):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SqlError(f"nested deeper than {MAX_DEPTH} levels at position {self.tok.pos}")
        try:
            return parse()
        finally:
            self.depth -= 1

    def or_(self) -> _Expr:
        pos = self.tok.pos
        left = self.and_()
        while self._is("keyword", "OR"):
            self.i += 1
            rpos = self.tok.pos
            left = _or(_as_boolean(left, pos), _as_boolean(self.and_(), rpos))
        return left

    def and_(self) -> _Expr:
        pos = self.tok.pos
        left = self.equality()
        while self._is("keyword", "AND"):
            self.i += 1
            rpos = self.tok.pos
            left = _and(_as_boolean(left, pos), _as_boolean(self.equality(), rpos))
        return left

    def equality(self) -> _Expr:
        left = self.comparison()
        while True:
            pos = self.tok.pos
            if self._is("op", "=") or self._is("op", "<>"):
                op = self._take("op").text
                right = self.comparison()
                for e in (left, right):
                    if e.constant and e.value is None:
                        raise SqlError(f"NULL cannot be compared with {op} at position {pos}: use IS [NOT] NULL")
                if left.constant and isinstance(left.value, bool) and right.constant and not isinstance(right.value, bool):
                    raise SqlError(f"a boolean cannot be compared with {right.value!r} at position {pos}")
                eq = _equal(left, right)
                left = eq if op == "=" else _not(eq)
            elif self._is("keyword", "IS"):
                self.i += 1
                negate = bool(self._is("keyword", "NOT") and self._take("keyword"))
                self._take("keyword", "NULL")
                null = _Expr(lambda p: None, constant=True)
                eq = _equal(left, null)
                left = _not(eq) if negate else eq
            else:
                return left

    def comparison(self) -> _Expr:
        left = self.unary()
        while True:
            pos = self.tok.pos
            if self.tok.kind == "op" and self.tok.text in (">", ">=", "<", "<="):
                op = self._take("op").text
                rpos = self.tok.pos
                right = self.unary()
                _comparable(left, pos)
                _comparable(right, rpos)
                left = _ordering(op, left, right)
                continue
            negate = False
            if self._is("keyword", "NOT") and self.toks[self.i + 1].kind == "keyword" and \
                    self.toks[self.i + 1].text in ("BETWEEN", "IN"):
                self.i += 1
                negate = True
            if self._is("keyword", "BETWEEN"):
                self.i += 1
                low_pos = self.tok.pos
                low = self.unary()
                self._take("keyword", "AND")
                high_pos = self.tok.pos
                high = self.unary()
                for e, p in ((left, pos), (low, low_pos), (high, high_pos)):
                    _comparable(e, p)
                if low.constant and high.constant and _compare(high.value, low.value) < 0:
                    raise SqlError(f"BETWEEN at position {pos}: the lower bound is above the upper bound")
                inside = _and(_ordering(">=", left, low), _ordering("<=", left, high))
                left = _not(inside) if negate else inside
            elif self._is("keyword", "IN"):
                self.i += 1
                if left.prop is None:
                    raise SqlError(f"IN at position {pos} needs a property on its left")
                self._take("op", "(")
                values = {self._string(self._take("string"))}
                while self._is("op", ","):
                    self.i += 1
                    values.add(self._string(self._take("string")))
                self._take("op", ")")
                name, members = left.prop, frozenset(values)
                left = _Expr(lambda p, n=name, m=members, neg=negate: None if p.get(n) is None
                             else (p[n] in m) != neg, boolean=True)
            elif negate:
                raise SqlError(f"expected BETWEEN or IN after NOT at position {self.tok.pos}")
            else:
                return left

    def unary(self) -> _Expr:
        return self._nested(self._unary)

    def _unary(self) -> _Expr:
        t = self.tok
        if self._is("op", "+"):
            self.i += 1
            return self.unary()
        if self._is("op", "-"):
            self.i += 1
            inner = self.unary()
            if inner.constant and isinstance(inner.value, Num):
                v = inner.value.negate()
                return _Expr(lambda p, v=v: v, constant=True, value=v)
            n = inner.node
            return _Expr(lambda p: (lambda v: v.negate() if isinstance(v, Num) else None)(n(p)))
        if self._is("keyword", "NOT"):
            self.i += 1
            return _not(_as_boolean(self.unary(), t.pos))
        return self.primary()

    def primary(self) -> _Expr:
        t = self.tok
        if t.kind == "op" and t.text == "(":
            self.i += 1
            inner = self._nested(self.or_)
            self._take("op", ")")
            return inner
        self.i += 1
        if t.kind == "word":
            return _Expr(lambda p, n=t.text: p.get(n), prop=t.text)
        if t.kind == "string":
            s = self._string(t)
            return _Expr(lambda p, s=s: s, constant=True, value=s)
        if t.kind == "int":
            text = t.text.rstrip("lL")
            value = int(text)
            if value > _LONG_MAX:
                raise SqlError(f"{t.text} at position {t.pos} is too large for a long")
            v = Num(value, "I" if value <= _INT_MAX else "L")
            return _Expr(lambda p, v=v: v, constant=True, value=v)
        if t.kind == "float":
            value = float(t.text)
            if math.isinf(value) or value < 5e-324:  # RocketMQ refuses beyond Double's range, and 0.0 too
                raise SqlError(f"{t.text} at position {t.pos} is outside the range RocketMQ accepts for decimals")
            v = Num(value, "D")
            return _Expr(lambda p, v=v: v, constant=True, value=v)
        if t.kind == "keyword" and t.text in ("TRUE", "FALSE"):
            b = t.text == "TRUE"
            return _Expr(lambda p, b=b: b, constant=True, value=b, boolean=True)
        if t.kind == "keyword" and t.text == "NULL":
            return _Expr(lambda p: None, constant=True, value=None)
        self.i -= 1
        found = "the end" if t.kind == "end" else repr(t.text)
        raise SqlError(f"expected a value or a property at position {t.pos}, found {found}")

    @staticmethod
    def _string(t: _Tok) -> str:
        return t.text[1:-1].replace("''", "'")


@dataclass(frozen=True)
class Selector:
    """A compiled selector: ``matches(properties)`` is True only for a definite match."""

    sql: str
    _node: Node

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        """True, False or None (unknown); raises nothing: a failed conversion is None."""
        try:
            return self._node(properties)
        except _EvalError:
            return None

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self.evaluate(properties) is True


@lru_cache(maxsize=1024)
def compile_selector(sql: str) -> Selector:
    """Compile once per distinct expression (subscriptions repeat); SqlError if invalid."""
    if not isinstance(sql, str) or not sql.strip():
        raise SqlError("the SQL92 expression is empty")
    if len(sql) > MAX_LENGTH:
        raise SqlError(f"the SQL92 expression is longer than {MAX_LENGTH} characters")
    return Selector(sql, _Parser(sql).parse().node)
