"""Command lookup that ignores case, so `mqadmin topiclist` and `TopicList` both work; and
the plain (pydantic-free) conversion of options set on each group and command as it is
resolved (plain_params.py)."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

from ferry.cli.plain_params import use_plain_params


class CaseInsensitiveGroup(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        use_plain_params(self, ctx)
        result: list[str] = super().parse_args(ctx, args)
        return result

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
