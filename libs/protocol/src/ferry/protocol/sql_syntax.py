"""SQL92 filters' syntax: the lark grammar of RocketMQ's subset, and the parse of a text to a
tree, every refusal a SqlFilterError naming where the text is wrong. sql_compiler.py turns the
tree to closures."""

from __future__ import annotations

import functools
from typing import Any

from ferry.protocol.errors import SubscriptionParseError

MAX_SQL_LENGTH = 8192  # parsing one this long takes ~50 ms of a service's loop

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


def parse(text: str) -> Any:
    """The lark tree of `text`; raises SqlFilterError."""
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
    return tree
