"""What people read: tables for humans, --json for scripts.

rich and msgspec are imported by the functions that use them: every `ferry` command imports
this module, and most print one table or one JSON document (issue 24.6, start-up time)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from ferry.protocol.codes import ResponseCode

if TYPE_CHECKING:
    from rich.progress import Progress

    from ferry.protocol.errors import FerryError


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console().print(table)


def print_json(obj: Any) -> None:
    import msgspec

    print(msgspec.json.format(msgspec.json.encode(obj)).decode())


def show_time(ms: int | None) -> str:
    """An epoch-ms time as tables print it, in UTC: 2026-11-26 18:40:01.371 ("" for none;
    --json keeps the raw number)."""
    if not ms or ms < 0:
        return ""
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def fail(message: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    # one line however long (scripts grep it), and brackets in it are text, not markup
    console = Console(stderr=True, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


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
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    return Progress(console=console, transient=True, disable=not console.is_terminal)
