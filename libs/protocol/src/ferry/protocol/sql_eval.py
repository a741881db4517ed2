"""SQL92 filters' evaluation: the closures a compiled filter is made of, each a few dict
lookups and comparisons over a message's properties, in three-valued logic (None: unknown).
Property values are strings: compared with a number they count as the number they spell."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Props = Mapping[str, str]
Cond = Callable[[Props], bool | None]  # None: unknown
Value = Callable[[Props], Any]


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


class Operand:
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


def any_of(parts: list[Cond]) -> Cond:
    return _kleene(parts, True)


def all_of(parts: list[Cond]) -> Cond:
    return _kleene(parts, False)


def _kleene(parts: list[Cond], decisive: bool) -> Cond:
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


def negate(cond: Cond) -> Cond:
    def negation(props: Props) -> bool | None:
        value = cond(props)
        return None if value is None else not value

    return negation


def number_of(operand: Operand) -> Value:
    name = operand.name
    if name is None:
        value = operand.value
        return lambda props: value

    def number(props: Props) -> int | float | None:
        text = props.get(name)
        return None if text is None else as_number(text)

    return number


def order(left: Value, op: str, right: Value) -> Cond:
    test: Callable[[Any, Any], bool] = {
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
    }[op]

    def ordered(props: Props) -> bool | None:
        a = left(props)
        if a is None:
            return None
        b = right(props)
        if b is None:
            return None
        return test(a, b)

    return ordered


def _as_boolean(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered == "true" else False if lowered == "false" else None


def equal(left: Operand, right: Operand) -> Cond:
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
