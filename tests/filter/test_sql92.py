"""SQL92 selectors with RocketMQ 4.9's meanings (tests/compat/test_sql92_against_java.py checks
the same evaluator case by case against RocketMQ's own filter)."""

from __future__ import annotations

import pytest

from ferrymq.filter.sql92 import MAX_DEPTH, MAX_LENGTH, SqlError, compile_selector


def matches(sql: str, **props: str) -> bool:
    return compile_selector(sql).matches(props)


def test_numbers_strings_and_their_java_conversions():
    assert matches("a > 5", a="10") and not matches("a > 5", a="3")
    assert not matches("a > 5", a="ten")  # does not parse: no match (RocketMQ: an evaluation error)
    assert not matches("a > 1", a="1.5")  # compared as an Integer: "1.5" does not parse
    assert matches("a > 1.0", a="1.5") and matches("a > 1.0", a=" 2")  # as a Double: trimmed, parses
    assert matches("a > 2147483648", a="2147483649") and not matches("a > 2147483647", a="2147483648")
    assert matches("a > b", a="10", b="9")  # two strings: compared as numbers
    assert matches("a = 'it''s'", a="it's") and not matches("a = 'x'", a="X")
    assert matches("a = TRUE", a="True") and not matches("a = TRUE", a="yes")
    assert matches("a > 1.0", a="NaN")  # Java's Double.compareTo puts NaN above everything


def test_missing_properties_are_unknown_and_never_match():
    for sql in ("a = 'x'", "a <> 'x'", "NOT a = 'x'", "a NOT IN ('x')", "a NOT BETWEEN 1 AND 2", "a"):
        assert compile_selector(sql).evaluate({}) is None, sql
    assert matches("a IS NULL") and matches("a IS NOT NULL", a="1")
    assert matches("a = 'x' OR b = 'y'", a="x") and not matches("a = 'x' AND b = 'y'", a="x")


def test_operators_precedence_and_short_circuits():
    assert matches("a BETWEEN 1 AND 3 AND b IN ('x', 'y')", a="3", b="y")
    assert not matches("a NOT BETWEEN 1 AND 3", a="2") and matches("a NOT IN ('x')", a="y")
    assert matches("a = 1 OR b = 2 AND c = 3", a="1")  # AND binds tighter
    assert not matches("NOT a = 1", a="2")  # NOT binds to `a` alone, as in RocketMQ
    assert matches("TRUE OR a > 1", a="x") and compile_selector("a > 1 OR TRUE").evaluate({"a": "x"}) is None
    assert matches("a = -5", a="-5") and matches("a > - 1", a="0") and matches("TAGS = 'TagA'", TAGS="TagA")
    assert matches("a = 1 /* why */ AND b = 2 -- done", a="1", b="2")


@pytest.mark.parametrize("sql, message", [
    ("", "empty"),
    ("a =", "expected a value"),
    ("a > 'x'", "cannot be compared"),
    ("a = NULL", r"use IS \[NOT\] NULL"),
    ("a IN (1)", "expected string"),
    ("5 IN ('5')", "needs a property"),
    ("a BETWEEN 3 AND 1", "lower bound is above"),
    ("a > 0.0", "outside the range"),
    ("a = 9223372036854775808", "too large"),
    ("a != 1", "unexpected '!'"),
    ("a = 010", "after a complete expression"),  # RocketMQ would silently read `a = 0`
    ("5", "does not give a boolean"),
    ("a.b = 1", "unexpected '.'"),
    ("a = 'open", "unexpected"),
])
def test_bad_expressions_are_refused_naming_the_place(sql, message):
    with pytest.raises(SqlError, match=message):
        compile_selector(sql)


def test_bounded_work_for_hostile_input():
    with pytest.raises(SqlError, match="nested deeper"):
        compile_selector("(" * (MAX_DEPTH + 5) + "a = 1" + ")" * (MAX_DEPTH + 5))
    with pytest.raises(SqlError, match="nested deeper"):
        compile_selector("NOT " * (MAX_DEPTH + 5) + "a = 1")
    with pytest.raises(SqlError, match="longer than"):
        compile_selector("a = 1 OR " * (MAX_LENGTH // 8) + "a = 1")
    long_or = " OR ".join(f"a = {i}" for i in range(300))  # wide is fine: no recursion per OR
    assert matches(long_or, a="299")
