"""What people read: tables for humans, --json for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console().print(table)


def print_json(obj: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(obj)).decode())


def fail(message: str) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False)
