"""Plain conversion of the CLI's str, int, float and bool options, without pydantic.

Typer (0.29) converts every option of the command being run through a pydantic TypeAdapter,
and importing pydantic and building the adapters is about 150 ms of a 0.5 s admin command
(issue 24.6). Our options are plain values: for those, each parameter's lazily built
converter (typer's `_runtime_param`, documented there as built on first use "to avoid up-front
costs") is set beforehand to one that converts as the adapters do. Anything else (paths,
choices, ranges, custom parsers) is left to typer. If typer's internals change, nothing is
set and typer converts everything itself: slower, never wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

try:
    from typer._coercion import RuntimeParam

    AVAILABLE = True
except ImportError:  # another typer: its own conversion is used
    AVAILABLE = False

TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE = frozenset({"", "0", "false", "f", "no", "n", "off"})


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise ValueError("not a boolean")


def _int(value: Any) -> int:
    if isinstance(value, bool | float):
        raise ValueError("not an integer")
    return int(value)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


CONVERT: dict[Any, Callable[[Any], Any]] = {
    str: _str,
    int: _int,
    float: float,
    bool: _bool,
    list[str]: _str,
    list[int]: _int,
}
NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _converter(annotation: Any, info: Any) -> Callable[[Any], Any] | None:
    """The plain conversion of a parameter, or None to leave it to typer."""
    special = (info.parser, info.min, info.max, getattr(info, "formats", None))
    if any(v is not None for v in special):
        return None
    try:
        return CONVERT.get(annotation)
    except TypeError:  # an unhashable annotation
        return None


if AVAILABLE:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class PlainParam(RuntimeParam):
        convert: Callable[[Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            many = isinstance(value, list | tuple)
            try:
                if many:
                    return [self.convert(v) for v in value]
                return self.convert(value)
            except (TypeError, ValueError):
                base = getattr(self.annotation, "__args__", (self.annotation,))[0]
                what = NAMES.get(base, getattr(base, "__name__", "value"))
                raise typer.BadParameter(
                    f"{value!r} is not a valid {what}", ctx=ctx, param=param
                ) from None


def use_plain_params(command: Any, ctx: Any) -> None:
    """Sets the plain converter on each of `command`'s options and arguments it suits (--help
    included: click makes it when the parameters are first asked for)."""
    if not AVAILABLE:
        return
    for param in command.get_params(ctx):
        desc = getattr(param, "type_descriptor", None)
        if desc is None or getattr(param, "_runtime_param", 0) is not None:
            continue
        convert = _converter(desc.annotation, desc.parameter_info)
        if convert is not None:
            param._runtime_param = PlainParam(
                parameter_info=desc.parameter_info, annotation=desc.annotation, convert=convert
            )
