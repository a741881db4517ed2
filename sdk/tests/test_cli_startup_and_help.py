"""The `ferry` command's help text, time format, option conversion and lazy imports (issue 24.6),
and what `ferry dev up` / `ferry serve` say without the `ferry[server]` extra.

How fast start-up is, is measured by bench/cli_startup.py, not here: these tests check what
makes it fast (what a command imports) and what users read.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from ferry.cli.groups import CaseInsensitiveGroup
from ferry.cli.main import app
from ferry.cli.output import show_time

RUNNER = CliRunner()
NOBODY = "127.0.0.1:1"  # nothing listens there: an admin command fails fast


def help_of(*args: str) -> str:
    done = RUNNER.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.mark.parametrize(
    "command",
    [(), ("admin",), ("dev", "up"), ("serve",), ("admin", "topicStatus"), ("admin", "printMsg")],
)
def test_help_shows_no_type_noise_for_flags(command: tuple[str, ...]) -> None:
    text = help_of(*command)
    assert "--help" in text
    assert "<bool>" not in text  # flags take no value: nothing to show after them
    assert "<list[" not in text


def test_help_names_what_options_take() -> None:
    status = help_of("admin", "topicStatus")
    assert "-t, --topic TOPIC" in status
    assert "-n, --namesrv HOST:PORT" in status
    assert "--set KEY=VALUE" in help_of("dev", "up")


def test_times_print_in_utc_to_the_ms() -> None:
    assert show_time(1_795_714_886_371) == "2026-11-26 17:41:26.371"
    assert show_time(1_795_714_886_005) == "2026-11-26 17:41:26.005"
    assert show_time(0) == ""  # never stored
    assert show_time(None) == ""


def test_plain_conversion_of_options_without_pydantic() -> None:
    got: dict[str, object] = {}
    small = typer.Typer(cls=CaseInsensitiveGroup, rich_markup_mode=None)

    @small.command("take")
    def take(
        count: Annotated[int, typer.Option("-c")] = 1,
        ratio: Annotated[float, typer.Option("-r")] = 0.5,
        name: Annotated[str | None, typer.Option("-n")] = None,
        flag: Annotated[bool, typer.Option("--flag")] = False,
        sets: Annotated[list[str] | None, typer.Option("--set")] = None,
    ) -> None:
        got.update(count=count, ratio=ratio, name=name, flag=flag, sets=sets)

    @small.command("other")
    def other() -> None:  # a group of two: commands are looked up by name
        pass

    args = ["TAKE", "-c", "7", "-r", "2.5", "-n", "x", "--flag", "--set", "a=1", "--set", "b=2"]
    done = RUNNER.invoke(small, args)
    assert done.exit_code == 0, done.output
    assert got == {"count": 7, "ratio": 2.5, "name": "x", "flag": True, "sets": ["a=1", "b=2"]}
    done = RUNNER.invoke(small, ["take"])
    assert done.exit_code == 0, done.output
    assert got == {"count": 1, "ratio": 0.5, "name": None, "flag": False, "sets": None}
    bad = RUNNER.invoke(small, ["take", "-c", "seven"])
    assert bad.exit_code == 2
    assert "'seven' is not a valid integer" in bad.output


def test_a_bad_number_is_a_usage_error_in_admin_commands() -> None:
    done = RUNNER.invoke(app, ["admin", "updateTopic", "-t", "T", "-r", "3x", "-n", NOBODY])
    assert done.exit_code == 2
    assert "'3x' is not a valid integer" in done.output


LOADED = "LOADED "
HEAVY = ("pydantic", "zmq", "msgspec", "rich", "opentelemetry", "ferry.client", "ferry.runtime")


def loaded_by(
    *args: str, block_runtime: bool = False
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Runs `ferry <args>` in a fresh interpreter; returns it and which HEAVY modules it
    imported. block_runtime: as if ferry.runtime were not installed."""
    code = (
        "import atexit, sys\n"
        + ("sys.modules['ferry.runtime'] = None\n" if block_runtime else "")
        + f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: print("
        f"{LOADED!r} + ' '.join(m for m in heavy if sys.modules.get(m)), file=sys.stderr))\n"
        "from ferry.cli.main import main\n"
        "sys.argv = ['ferry', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )
    marks = [ln for ln in done.stderr.splitlines() if ln.startswith(LOADED)]
    assert marks, done.stderr
    return done, set(marks[-1][len(LOADED) :].split())


def test_help_imports_none_of_the_heavy_modules() -> None:
    done, loaded = loaded_by("--help")
    assert done.returncode == 0
    assert loaded == set()
    done, loaded = loaded_by("admin", "--help")
    assert done.returncode == 0
    assert loaded == set()


def test_an_admin_command_imports_the_client_but_not_pydantic_or_the_server() -> None:
    done, loaded = loaded_by("admin", "topicList", "-n", NOBODY)
    assert done.returncode == 3  # nobody answers
    assert "ferry.client" in loaded
    assert "pydantic" not in loaded
    assert "ferry.runtime" not in loaded


@pytest.mark.parametrize(
    "args",
    [("dev", "up"), ("serve", "broker"), ("serve", "namesrv")],
)
def test_server_commands_without_ferry_server_say_what_to_install(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    extra = ("--data-dir", str(tmp_path)) if args[0] == "dev" else ()
    done, _ = loaded_by(*args, *extra, block_runtime=True)
    assert done.returncode == 1
    said = [ln for ln in done.stderr.splitlines() if not ln.startswith(LOADED)]
    assert len(said) == 1, done.stderr  # one line, no traceback
    assert "pip install 'ferry[server]'" in said[0]
    assert "ferry.runtime" in said[0]
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_cli_modules_import_nothing_heavy_at_the_top() -> None:
    """Every heavy import of ferry.cli sits inside the function that needs it."""
    cli = Path(__file__).parents[1] / "src" / "ferry" / "cli"
    for path in sorted(cli.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                heavy = [h for h in HEAVY if name == h or name.startswith(h + ".")]
                assert not heavy, f"{path.name} imports {name} at the top"
