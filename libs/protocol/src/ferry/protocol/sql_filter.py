"""SQL92 property filters (RocketMQ's MessageSelector.bySql): parsed once with a lark grammar and
compiled to a closure over a message's properties, so that each record costs a few dict
lookups and comparisons.

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
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ferry.protocol.errors import SubscriptionParseError

TAG = "TAG"
SQL92 = "SQL92"
EXPRESSION_TYPES = (TAG, SQL92)
MAX_SQL_LENGTH = 8192  # parsing one this long takes ~50 ms of a service's loop
MAX_DEPTH = 64  # nested parentheses and NOTs

Props = Mapping[str, str]
Predicate = Callable[[Props], bool]
_Cond = Callable[[Props], bool | None]  # None: unknown
_Value = Callable[[Props], Any]

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: NOT not_expr -> negation
    | predicate
?predicate: operand COMPARE operand -> compare
    | operand NOT? BETWEEN operand _AND operand -> between
    | operand NOT? IN "(" STRING ("," STRING)* ")" -> within
    | operand IS NOT? NULL -> is_null
    | operand
    | "(" or_expr ")"
?operand: IDENT -> prop
    | STRING -> string
    | SIGN? NUMBER -> number
    | TRUE -> true
    | FALSE -> false

COMPARE: "<>" | ">=" | "<=" | "=" | ">" | "<"
SIGN: "+" | "-"
_OR: "OR"i
_AND: "AND"i
NOT: "NOT"i
BETWEEN: "BETWEEN"i
IN: "IN"i
IS: "IS"i
NULL: "NULL"i
TRUE: "TRUE"i
FALSE: "FALSE"i
IDENT: /[a-z_$][a-z0-9_$]*/i
STRING: /'(?:[^']|'')*'/
NUMBER.2: /(\d+\.\d*|\.\d+)(e[+-]?\d+)?|\d+e[+-]?\d+/i | /\d+l?/i

%ignore /[ \t\f\r\n]+/
%ignore /--[^\n]*/
%ignore /\/\*(.|\n)*?\*\//
"""

# what the parser's terminal names mean to a user
_WORDS = {
    "IDENT": "a property name",
    "STRING": "a 'string'",
    "NUMBER": "a number",
    "COMPARE": "a comparison (= <> > >= < <=)",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "SIGN": "a sign",
    "$END": "the end",
}


class SqlFilterError(SubscriptionParseError):
    """A filter that does not parse or means nothing: where (1-based line and column, 0-based
    offset into the text) and why. On the wire it is a SubscriptionParseError whose message
    names the position."""

    def __init__(self, reason: str, text: str, offset: int) -> None:
        offset = max(0, min(offset, len(text)))
        self.reason = reason
        self.offset = offset
        self.line = text.count("\n", 0, offset) + 1
        self.column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        near = text[max(0, offset - 30) : offset + 30]  # a window: a filter may be long
        super().__init__(
            f"SQL92 filter error at line {self.line}, column {self.column}: {reason} "
            f"(near {near!r})"
        )


@functools.cache
def _parser() -> Any:
    import lark  # imported on the first SQL filter: tag-only users never pay for it

    return lark.Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False)


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
    import lark

    if len(text) > MAX_SQL_LENGTH:
        raise SqlFilterError(f"longer than {MAX_SQL_LENGTH} characters", text, MAX_SQL_LENGTH)
    if not text.strip():
        raise SqlFilterError("empty expression", text, 0)
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedCharacters as exc:
        at = exc.pos_in_stream or 0
        raise SqlFilterError(f"unexpected character {text[at]!r}", text, at) from None
    except lark.exceptions.UnexpectedToken as exc:
        token = exc.token
        if token.type == "$END":
            where, what = len(text.rstrip()), "unexpected end"
        else:
            where, what = token.start_pos or 0, f"unexpected {str(token)!r}"
        expected = sorted({_WORDS.get(t, t.lower()) for t in exc.expected})
        raise SqlFilterError(f"{what}, expected {' or '.join(expected[:6])}", text, where) from None
    except lark.exceptions.LarkError as exc:  # any other parser complaint, still typed
        raise SqlFilterError(str(exc).splitlines()[0], text, 0) from None
    compiler = _Compiler(text)
    cond = compiler.condition(tree, 0)
    return SqlFilter(lambda props: cond(props) is True, frozenset(compiler.names))


def check_sql(text: str) -> None:
    """Raises SqlFilterError when `text` is not a filter."""
    compile_sql(text)


def as_number(text: str) -> int | float | None:
    """A property's value as a number, if it spells one (as Java's Long/Double parse it)."""
    if "_" in text:  # Python's int() takes 1_000; Java does not
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


# ---- the compiler: tree -> closures -------------------------------------------------------


class _Operand:
    """A compiled operand: a property (name) or a constant (value: str, int, float, bool)."""

    __slots__ = ("name", "offset", "value")

    def __init__(self, name: str | None, value: Any, offset: int) -> None:
        self.name, self.value, self.offset = name, value, offset

    @property
    def kind(self) -> str:
        if self.name is not None:
            return "property"
        if isinstance(self.value, bool):
            return "boolean"
        return "string" if isinstance(self.value, str) else "number"


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.names: set[str] = set()

    def fail(self, reason: str, offset: int) -> SqlFilterError:
        return SqlFilterError(reason, self.text, offset)

    def condition(self, node: Any, depth: int) -> _Cond:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}", _offset(node))
        kind = node.data
        if kind == "or_expr":
            return _any([self.condition(c, depth + 1) for c in node.children])
        if kind == "and_expr":
            return _all([self.condition(c, depth + 1) for c in node.children])
        if kind == "negation":
            return _not(self.condition(node.children[1], depth + 1))
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

    def operand(self, node: Any) -> _Operand:
        kind, children = node.data, node.children
        offset = _offset(node)
        if kind == "prop":
            self.names.add(str(children[0]))
            return _Operand(str(children[0]), None, offset)
        if kind == "string":
            return _Operand(None, str(children[0])[1:-1].replace("''", "'"), offset)
        if kind == "true":
            return _Operand(None, True, offset)
        if kind == "false":
            return _Operand(None, False, offset)
        if kind == "number":
            sign = -1 if len(children) == 2 and str(children[0]) == "-" else 1
            raw = str(children[-1])
            try:
                value: int | float = int(raw.rstrip("lL"))
            except ValueError:
                value = float(raw)
            return _Operand(None, sign * value, offset)
        raise self.fail("a value (property, number or 'string') is needed here", offset)

    def compare(self, left: _Operand, op: str, right: _Operand, at: int) -> _Cond:
        if op in ("=", "<>"):
            if left.name is None and right.name is None:
                kinds = {left.kind, right.kind}
                if len(kinds) > 1:
                    raise self.fail(f"cannot compare a {left.kind} with a {right.kind}", at)
            cond = _equal(left, right)
            return _not(cond) if op == "<>" else cond
        for side in (left, right):
            if side.kind in ("string", "boolean"):
                raise self.fail(
                    f"{op} compares numbers, not a {side.kind} (strings take = <> IN)",
                    side.offset,
                )
        return _order(_number_of(left), op, _number_of(right))

    def between(self, node: Any) -> _Cond:
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
        x, lo, hi = _number_of(value), _number_of(low), _number_of(high)
        if negated:  # outside the range; unknown stays unknown, as NOT (x BETWEEN ...)
            return _any([_order(x, "<", lo), _order(x, ">", hi)])
        return _all([_order(x, ">=", lo), _order(x, "<=", hi)])

    def within(self, node: Any) -> _Cond:
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

    def is_null(self, node: Any) -> _Cond:
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


# ---- the closures ---------------------------------------------------------------------------


def _any(parts: list[_Cond]) -> _Cond:
    return _kleene(parts, True)


def _all(parts: list[_Cond]) -> _Cond:
    return _kleene(parts, False)


def _kleene(parts: list[_Cond], decisive: bool) -> _Cond:
    """OR (decisive True) or AND (decisive False) of three-valued parts: `decisive` as soon
    as one part is; else unknown if one part was; else the other value."""

    def combined(props: Props) -> bool | None:
        unknown = False
        for part in parts:
            value = part(props)
            if value is decisive:
                return decisive
            if value is None:
                unknown = True
        return None if unknown else not decisive

    return combined


def _not(cond: _Cond) -> _Cond:
    def negation(props: Props) -> bool | None:
        value = cond(props)
        return None if value is None else not value

    return negation


def _number_of(operand: _Operand) -> _Value:
    name = operand.name
    if name is None:
        value = operand.value
        return lambda props: value

    def number(props: Props) -> int | float | None:
        text = props.get(name)
        return None if text is None else as_number(text)

    return number


def _order(left: _Value, op: str, right: _Value) -> _Cond:
    test: Callable[[Any, Any], bool] = {
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
    }[op]

    def order(props: Props) -> bool | None:
        a = left(props)
        if a is None:
            return None
        b = right(props)
        if b is None:
            return None
        return test(a, b)

    return order


def _as_boolean(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _equal(left: _Operand, right: _Operand) -> _Cond:
    """= between a property and a constant compares in the constant's kind (a number, a
    string, a boolean); between two properties, as strings, or as numbers when both are."""
    if left.name is None and right.name is not None:
        left, right = right, left
    name = left.name
    if name is None:  # two constants
        same = left.value == right.value
        return lambda props: same
    other = right.name
    if other is not None:

        def both(props: Props) -> bool | None:
            a, b = props.get(name), props.get(other)
            if a is None or b is None:
                return None
            if a == b:
                return True
            x, y = as_number(a), as_number(b)
            return x is not None and y is not None and x == y

        return both
    value = right.value
    if isinstance(value, bool):

        def boolean(props: Props) -> bool | None:
            text = props.get(name)
            seen = None if text is None else _as_boolean(text)
            return None if seen is None else seen == value

        return boolean
    if isinstance(value, str):

        def string(props: Props) -> bool | None:
            text = props.get(name)
            return None if text is None else text == value

        return string

    def number(props: Props) -> bool | None:
        text = props.get(name)
        if text is None:
            return None
        seen = as_number(text)
        return None if seen is None else seen == value

    return number
