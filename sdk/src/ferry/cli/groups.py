"""Command lookup that ignores case, so `mqadmin topiclist` and `TopicList` both work."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup


class CaseInsensitiveGroup(TyperGroup):
    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        wanted = cmd_name.lower()
        for name in self.list_commands(ctx):
            if name.lower() == wanted:
                return super().get_command(ctx, name)
        return None
