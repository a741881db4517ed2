"""What people read: tables for humans, --json for scripts.

rich and msgspec are imported by the functions that use them: every `ferry` command imports
this module, and most print one table or one JSON document (issue 24.6, start-up time)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from ferry.cli import tables
from ferry.protocol.codes import ResponseCode

if TYPE_CHECKING:
    from rich.progress import Progress

    from ferry.protocol.errors import FerryError


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, fields: bool = False
) -> None:
    """A table for people: boxed on a terminal when it fits, one block per record when it
    does not; aligned plain columns, one record per line, when stdout is not a terminal.
    `fields`: the rows are (name, value) pairs describing one thing (a message, a broker)."""
    cells = [[_cell(v) for v in row] for row in rows]
    if not sys.stdout.isatty():
        emit(tables.plain(title, columns, cells))
        return
    width = shutil.get_terminal_size().columns
    widths = tables.fitted_widths(columns, cells, width)
    if widths is None:
        emit(tables.records(title, columns, cells, width, fields=fields))
        return
    _print_boxed(title, columns, cells, widths, width)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _print_boxed(
    title: str, columns: Sequence[str], cells: list[list[str]], widths: list[int], width: int
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=width)
    if title:  # apart from the table: rich would fold a long title to the table's width
        console.print(Text(title), soft_wrap=True)
    table = Table()
    for col, w in zip(columns, widths, strict=True):
        table.add_column(Text(col), width=w, overflow="fold")
    for row in cells:
        # Text, not str: a body like "[red]" is shown as it is, never read as markup
        table.add_row(*(Text(v, overflow="fold") for v in row))
    console.print(table)


def print_json(obj: Any) -> None:
    import msgspec

    emit(msgspec.json.format(msgspec.json.encode(obj)).decode())


def emit(text: str) -> None:
    """Writes a line of output. A reader that stopped reading (`| head -1`) got what it
    wanted: the command ends quietly, with no traceback, as mqadmin does."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # nothing more can be written; stdout is closed again at exit, quietly on /dev/null
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(EXIT_OK) from None


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
    """A progress bar on stderr, shown only when both stdout and stderr are terminals: never
    in scripts, and never over `| less` or `| grep` (quiet whenever stdout is piped)."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    shown = console.is_terminal and sys.stdout.isatty()
    return Progress(console=console, transient=True, disable=not shown)
