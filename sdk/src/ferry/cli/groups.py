"""Command lookup that ignores case, so `mqadmin topiclist` and `TopicList` both work; flags
that take mqadmin's true/false word after them (`-d true`, `-r false`); and the plain
(pydantic-free) conversion of options set on each group and command as it is resolved
(plain_params.py)."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

from ferry.cli.plain_params import use_plain_params


class CaseInsensitiveGroup(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        use_plain_params(self, ctx)
        result: list[str] = super().parse_args(ctx, args)
        return result

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            rest = mqadmin_booleans(cmd, rest)
        return name, cmd, rest

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = self._find(ctx, cmd_name)
        if found is not None:
            use_plain_params(found, ctx)
        return found

    def _find(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        wanted = cmd_name.lower()
        for name in self.list_commands(ctx):
            if name.lower() == wanted:
                return super().get_command(ctx, name)
        return None


BOOLEAN_WORDS = {"true": True, "false": False}


def mqadmin_booleans(cmd: Any, args: list[str]) -> list[str]:
    """mqadmin's boolean options take a value (`printMsg -d true`, `deleteSubGroup -r
    false`); ours are flags. A flag followed by true or false (any case) is kept or dropped
    accordingly, so both habits work (admin commands take no positional arguments)."""
    flags = {
        opt
        for p in getattr(cmd, "params", [])
        if getattr(p, "is_flag", False) and getattr(p, "is_bool_flag", False)
        for opt in p.opts
    }
    if not flags:
        return args
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        word = args[i + 1].lower() if i + 1 < len(args) else ""
        if arg == "--":
            out.extend(args[i:])
            break
        if arg in flags and word in BOOLEAN_WORDS:
            if BOOLEAN_WORDS[word]:
                out.append(arg)
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
