"""SQL92 filters' compiler: a parsed tree (sql_syntax.py) to one three-valued closure over a
message's properties (sql_eval.py), refusing what parses but means nothing (a string compared
with >, BETWEEN bounds the wrong way round, a bare property as a condition)."""

from __future__ import annotations

from typing import Any

from ferry.protocol.sql_eval import (
    Cond,
    Operand,
    Props,
    all_of,
    any_of,
    equal,
    negate,
    number_of,
    order,
)
from ferry.protocol.sql_syntax import SqlFilterError

MAX_DEPTH = 64  # nested parentheses and NOTs


class Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.names: set[str] = set()

    def fail(self, reason: str, offset: int) -> SqlFilterError:
        return SqlFilterError(reason, self.text, offset)

    def condition(self, node: Any, depth: int) -> Cond:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}", _offset(node))
        kind = node.data
        if kind == "or_expr":
            return any_of([self.condition(c, depth + 1) for c in node.children])
        if kind == "and_expr":
            return all_of([self.condition(c, depth + 1) for c in node.children])
        if kind == "negation":
            return negate(self.condition(node.children[1], depth + 1))
        if kind == "compare":
            left, op, right = node.children
            return self.compare(self.operand(left), str(op), self.operand(right), op.start_pos)
        if kind == "between":
            return self.between(node)
        if kind == "within":
            return self.within(node)
        if kind == "is_null":
            return self.is_null(node)
        operand = self.operand(node)
        if operand.kind == "boolean":
            value = operand.value
            return lambda props: value
        raise self.fail(
            f"{operand.kind} {self.text_of(node)!r} is not a condition; compare it "
            "(a = 'x', a > 5, a IS NOT NULL)",
            operand.offset,
        )

    def text_of(self, node: Any) -> str:
        tokens = list(node.scan_values(lambda _: True))
        return "".join(str(t) for t in tokens)

    def operand(self, node: Any) -> Operand:
        kind, children = node.data, node.children
        offset = _offset(node)
        if kind == "prop":
            self.names.add(str(children[0]))
            return Operand(str(children[0]), None, offset)
        if kind == "string":
            return Operand(None, str(children[0])[1:-1].replace("''", "'"), offset)
        if kind == "true":
            return Operand(None, True, offset)
        if kind == "false":
            return Operand(None, False, offset)
        if kind == "number":
            sign = -1 if len(children) == 2 and str(children[0]) == "-" else 1
            raw = str(children[-1])
            try:
                value: int | float = int(raw.rstrip("lL"))
            except ValueError:
                value = float(raw)
            return Operand(None, sign * value, offset)
        raise self.fail("a value (property, number or 'string') is needed here", offset)

    def compare(self, left: Operand, op: str, right: Operand, at: int) -> Cond:
        if op in ("=", "<>"):
            if left.name is None and right.name is None:
                kinds = {left.kind, right.kind}
                if len(kinds) > 1:
                    raise self.fail(f"cannot compare a {left.kind} with a {right.kind}", at)
            cond = equal(left, right)
            return negate(cond) if op == "<>" else cond
        for side in (left, right):
            if side.kind in ("string", "boolean"):
                raise self.fail(
                    f"{op} compares numbers, not a {side.kind} (strings take = <> IN)",
                    side.offset,
                )
        return order(number_of(left), op, number_of(right))

    def between(self, node: Any) -> Cond:
        children = node.children
        negated = len(children) == 5
        value, low, high = (self.operand(c) for c in (children[0], children[-2], children[-1]))
        for side in (value, low, high):
            if side.kind in ("string", "boolean"):
                raise self.fail(f"BETWEEN takes numbers, not a {side.kind}", side.offset)
        if low.name is None and high.name is None and low.value > high.value:
            raise self.fail(
                f"BETWEEN {low.value} AND {high.value}: the low bound is above the high one",
                low.offset,
            )
        x, lo, hi = number_of(value), number_of(low), number_of(high)
        if negated:  # outside the range; unknown stays unknown, as NOT (x BETWEEN ...)
            return any_of([order(x, "<", lo), order(x, ">", hi)])
        return all_of([order(x, ">=", lo), order(x, "<=", hi)])

    def within(self, node: Any) -> Cond:
        children = node.children
        subject = self.operand(children[0])
        name = subject.name
        if name is None:
            raise self.fail("IN needs a property on its left", subject.offset)
        negated = str(children[1]).upper() == "NOT"
        items = frozenset(
            str(t)[1:-1].replace("''", "'") for t in children if getattr(t, "type", "") == "STRING"
        )

        def within(props: Props) -> bool | None:
            value = props.get(name)
            if value is None:
                return None
            return (value in items) != negated

        return within

    def is_null(self, node: Any) -> Cond:
        children = node.children
        subject = self.operand(children[0])
        negated = len(children) == 4
        name = subject.name
        if name is None:  # a constant is never NULL
            return lambda props: negated
        if negated:
            return lambda props: name in props
        return lambda props: name not in props


def _offset(node: Any) -> int:
    for token in node.scan_values(lambda t: hasattr(t, "start_pos")):
        return int(token.start_pos or 0)
    return 0
