"""What people read: tables for humans, --json for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import FerryError


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


# Exit codes scripts can rely on (docs/operations.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the operation was refused or failed
EXIT_USAGE = 2  # bad flags or values (click's own usage errors use 2 as well)
EXIT_NOT_FOUND = 3  # no such topic, group, message or broker; or nobody answered

NOT_FOUND_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.QUERY_NOT_FOUND,
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
        ResponseCode.CONSUMER_NOT_ONLINE,
        ResponseCode.BROKER_NOT_EXIST,
        ResponseCode.RPC_TIME_OUT,
        ResponseCode.RPC_SEND_TO_CHANNEL_FAILED,
    }
)


def exit_code_for(err: FerryError) -> int:
    if err.code in NOT_FOUND_CODES:
        return EXIT_NOT_FOUND
    if err.code == ResponseCode.INVALID_PARAMETER:
        return EXIT_USAGE
    return EXIT_FAILED


def die(err: FerryError) -> NoReturn:
    """Prints the error (it names the broker or name server that failed) and exits."""
    fail(str(err))
    raise typer.Exit(exit_code_for(err))


def not_found(message: str) -> NoReturn:
    fail(message)
    raise typer.Exit(EXIT_NOT_FOUND)


def progress() -> Progress:
    """A progress bar on stderr, shown only when stderr is a terminal (never in scripts)."""
    console = Console(stderr=True)
    return Progress(console=console, transient=True, disable=not console.is_terminal)
