"""SQL92 filter semantics: every operator, RocketMQ's three-valued NULL logic, and bad
expressions refused with their position."""

from __future__ import annotations

import time

import pytest

from ferry.protocol.errors import SubscriptionParseError
from ferry.protocol.sql_filter import (
    MAX_DEPTH,
    SqlFilterError,
    check_sql,
    compile_filter,
    compile_sql,
)


def matches(sql: str, **props: str) -> bool:
    return compile_sql(sql)(props)


@pytest.mark.parametrize(
    ("sql", "props", "expected"),
    [
        ("a = 5", {"a": "5"}, True),
        ("a = 5", {"a": "6"}, False),
        ("a <> 5", {"a": "6"}, True),
        ("a <> 5", {"a": "5"}, False),
        ("a > 5", {"a": "10"}, True),  # numeric, not string, order: "10" < "5" as text
        ("a > 5", {"a": "5"}, False),
        ("a >= 5", {"a": "5"}, True),
        ("a < 5", {"a": "-7"}, True),
        ("a <= 5", {"a": "5.0"}, True),
        ("a > 1.5", {"a": "2"}, True),
        ("a > -5", {"a": "-4"}, True),
        ("a > 1e3", {"a": "1001"}, True),
        ("a = 5L", {"a": "5"}, True),
        ("a BETWEEN 1 AND 3", {"a": "1"}, True),
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a BETWEEN 1 AND 3", {"a": "4"}, False),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a IN ('x', 'y')", {"a": "z"}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {"a": "x"}, False),
        ("a = 'x'", {"a": "x"}, True),
        ("a <> 'x'", {"a": "y"}, True),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = TRUE", {"a": "true"}, True),
        ("a = FALSE", {"a": "TRUE"}, False),
        ("a = b", {"a": "1", "b": "1.0"}, True),  # two numbers
        ("a = b", {"a": "x", "b": "x"}, True),
        ("a > b", {"a": "3", "b": "2"}, True),
        ("TAGS = 'A' OR TAGS = 'B'", {"TAGS": "B"}, True),
        ("TRUE", {}, True),
        ("FALSE", {}, False),
        ("NOT FALSE", {}, True),
        ("a = 1 AND b = 2", {"a": "1", "b": "2"}, True),
        ("a = 1 AND b = 2", {"a": "1", "b": "3"}, False),
        ("a = 1 OR b = 2", {"a": "0", "b": "2"}, True),
        ("a = 1 or b = 2 and c = 3", {"a": "1"}, True),  # AND binds tighter than OR
        ("(a = 1 or b = 2) and c = 3", {"a": "1"}, False),
        ("not a = 1", {"a": "2"}, True),  # NOT binds looser than a comparison
        ("andy = 1 AND ORDER_ID = 2", {"andy": "1", "ORDER_ID": "2"}, True),
        ("a > 5 -- a comment\n AND /* another */ b = 1", {"a": "6", "b": "1"}, True),
    ],
)
def test_every_operator(sql: str, props: dict[str, str], expected: bool) -> None:
    assert compile_sql(sql)(props) is expected


@pytest.mark.parametrize(
    "sql",
    [
        "a > 5",
        "a = 5",
        "a <> 5",
        "a = 'x'",
        "a <> 'x'",
        "a BETWEEN 1 AND 3",
        "a NOT BETWEEN 1 AND 3",
        "a IN ('x')",
        "a NOT IN ('x')",
        "NOT (a > 5)",
        "NOT (a <> 'x')",
        "NOT (a IN ('x'))",
        "NOT NOT (a > 5)",
        "a = b",
        "a > 5 OR b > 5",
        "NOT (a > 5 OR b > 5)",
        "a = TRUE",
        "a IS NOT NULL",
    ],
)
def test_a_missing_property_never_matches(sql: str) -> None:
    """Comparisons with a missing property are unknown, and NOT unknown is unknown."""
    assert matches(sql) is False


def test_three_valued_and_or() -> None:
    # unknown AND false is false: its negation matches
    assert matches("NOT (a > 5 AND b = 1)", b="2") is True
    # unknown AND true is unknown
    assert matches("NOT (a > 5 AND b = 1)", b="1") is False
    # unknown OR true is true
    assert matches("a > 5 OR b = 1", b="1") is True
    # unknown OR false is unknown: its negation does not match
    assert matches("NOT (a > 5 OR b = 1)", b="2") is False


def test_is_null_is_never_unknown() -> None:
    assert matches("a IS NULL") is True
    assert matches("a IS NULL", a="") is False
    assert matches("NOT (a IS NULL)", a="1") is True
    assert matches("a IS NOT NULL", a="") is True
    assert matches("5 IS NULL") is False


def test_a_value_that_is_not_a_number_is_unknown_to_a_numeric_comparison() -> None:
    assert matches("a > 5", a="abc") is False
    assert matches("NOT (a > 5)", a="abc") is False
    assert matches("a = 5", a="five") is False
    assert matches("a <> 5", a="five") is False
    assert matches("a > 5", a="1_000") is False  # Python's int() takes it, Java does not
    assert matches("a = TRUE", a="yes") is False
    assert matches("a = FALSE", a="yes") is False


def test_strings_compare_exactly() -> None:
    assert matches("a = '5'", a="5") is True
    assert matches("a = '5'", a="5.0") is False  # a string constant: no numbers
    assert matches("a = 'X'", a="x") is False
    assert matches("a IN ('5')", a="05") is False


@pytest.mark.parametrize(
    ("sql", "line", "column", "words"),
    [
        ("a >", 1, 4, "unexpected end"),
        ("a > > 5", 1, 5, "unexpected '>'"),
        ("a == 1", 1, 4, "unexpected '='"),
        ("a = NULL", 1, 5, "unexpected 'NULL'"),
        ("a # 1", 1, 3, "unexpected character '#'"),
        ("(a > 1", 1, 7, "expected ')'"),
        ("a > 5 AND\n  b <", 2, 6, "unexpected end"),
        ("a > 'x'", 1, 5, "compares numbers"),
        ("a >= TRUE", 1, 6, "compares numbers"),
        ("a BETWEEN 'a' AND 'z'", 1, 11, "BETWEEN takes numbers"),
        ("a BETWEEN 3 AND 1", 1, 11, "low bound is above"),
        ("a IN (1, 2)", 1, 7, "expected a 'string'"),
        ("'x' IN ('x')", 1, 1, "IN needs a property"),
        ("'x' = 5", 1, 5, "cannot compare a string with a number"),
        ("a", 1, 1, "not a condition"),
        ("a = 1 AND b", 1, 11, "not a condition"),
        ("5", 1, 1, "not a condition"),
        ("", 1, 1, "empty"),
        ("   ", 1, 1, "empty"),
    ],
)
def test_a_bad_expression_names_its_position(sql: str, line: int, column: int, words: str) -> None:
    with pytest.raises(SqlFilterError) as caught:
        compile_sql(sql)
    err = caught.value
    assert (err.line, err.column) == (line, column)
    assert words in err.message
    assert f"line {line}, column {column}" in err.message
    assert isinstance(err, SubscriptionParseError)  # what the wire carries


def test_limits_are_typed_errors() -> None:
    deep = "NOT " * (MAX_DEPTH + 5) + "a > 1"
    with pytest.raises(SqlFilterError, match="nested deeper"):
        check_sql(deep)
    nested = "(" * 1000 + "a > 1" + ")" * 1000  # parentheses alone add no depth
    assert compile_sql(nested)({"a": "2"}) is True
    with pytest.raises(SqlFilterError, match="longer than"):
        check_sql("a = '" + "x" * 9000 + "'")
    # a long flat OR chain is fine: it is not nested
    many = " OR ".join(f"a = {i}" for i in range(500))
    assert compile_sql(many)({"a": "499"}) is True


def test_compiled_once_per_text() -> None:
    assert compile_sql("x > 1 AND y < 2") is compile_sql("x > 1 AND y < 2")


def test_a_filter_names_the_properties_it_reads() -> None:
    sql = "a > 1 AND (TAGS IN ('x') OR b IS NULL) AND c BETWEEN d AND 5"
    assert compile_filter(sql).names == {"a", "TAGS", "b", "c", "d"}


def test_a_refusal_is_remembered_too() -> None:
    bad = "a > > " + "1" * 4000
    with pytest.raises(SqlFilterError):
        check_sql(bad)
    started = time.perf_counter()
    for _ in range(100):
        with pytest.raises(SqlFilterError, match="line 1, column 5"):
            check_sql(bad)
    assert time.perf_counter() - started < 0.5  # not parsed 100 times
