"""SQL92 property filters (RocketMQ's MessageSelector.bySql): parsed once with a lark grammar and
compiled to a closure over a message's properties, so that each record costs a few dict
lookups and comparisons. This module is the public face; the work is in sql_syntax.py (grammar,
parse, errors), sql_compiler.py (tree to closures) and sql_eval.py (the closures).

RocketMQ's subset: = <> > >= < <=, [NOT] BETWEEN, [NOT] IN ('a', 'b'), IS [NOT] NULL, AND, OR,
NOT, TRUE/FALSE, integer, decimal and 'quoted' constants; names are user properties and TAGS.
Property values are strings: compared with a number they count as the number they spell.

Three-valued logic, as RocketMQ's (SQL's): a comparison with a missing property, or with a
value that is not a number where a number is needed, is unknown; NOT unknown is unknown; AND
is false if either side is false, OR true if either side is true, else unknown if either side
is; a message matches only when the whole filter is true. So `NOT (a > 5)` does not match a
message without `a`. IS NULL and IS NOT NULL are never unknown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from ferry.protocol.sql_compiler import MAX_DEPTH, Compiler
from ferry.protocol.sql_eval import Props, as_number
from ferry.protocol.sql_syntax import MAX_SQL_LENGTH, SqlFilterError, parse

__all__ = [
    "EXPRESSION_TYPES",
    "MAX_DEPTH",
    "MAX_SQL_LENGTH",
    "SQL92",
    "TAG",
    "Predicate",
    "Props",
    "SqlFilter",
    "SqlFilterError",
    "as_number",
    "check_sql",
    "compile_filter",
    "compile_sql",
]

TAG = "TAG"
SQL92 = "SQL92"
EXPRESSION_TYPES = (TAG, SQL92)

Predicate = Callable[[Props], bool]


class SqlFilter(NamedTuple):
    predicate: Predicate
    names: frozenset[str]  # the properties it reads: a reader may look up only these


def compile_sql(text: str) -> Predicate:
    """The filter as a predicate over a message's properties (TAGS included); raises
    SqlFilterError."""
    return compile_filter(text).predicate


def compile_filter(text: str) -> SqlFilter:
    """compile_sql's predicate with the names it reads. Cached, refusals too: every pull of
    a subscription names the same text, and a consumer with a bad one keeps asking."""
    compiled = _compiled(text)
    if isinstance(compiled, SqlFilter):
        return compiled
    reason, offset = compiled
    raise SqlFilterError(reason, text, offset)  # a new one: a raised error keeps its frames


@functools.lru_cache(maxsize=1024)
def _compiled(text: str) -> SqlFilter | tuple[str, int]:
    try:
        return _compile(text)
    except SqlFilterError as err:
        return err.reason, err.offset


def _compile(text: str) -> SqlFilter:
    tree = parse(text)
    compiler = Compiler(text)
    cond = compiler.condition(tree, 0)
    return SqlFilter(lambda props: cond(props) is True, frozenset(compiler.names))


def check_sql(text: str) -> None:
    """Raises SqlFilterError when `text` is not a filter."""
    compile_sql(text)
