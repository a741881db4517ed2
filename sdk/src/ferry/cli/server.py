"""What `ferry dev up` and `ferry serve` need beyond the SDK: ferry.runtime and the services.

They come with the `ferry[server]` extra, so the client and `ferry admin` install without
them. A command that needs them says so in one line when they are missing, instead of a
traceback or a service that dies before READY.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

import typer

from ferry.cli.output import EXIT_FAILED, fail

INSTALL = "pip install 'ferry[server]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing, or blocked in sys.modules
        return False


def require_server(command: str, services: Iterable[str] | None = None) -> None:
    """Exits (code 1) with one line naming what to install unless ferry.runtime and the
    modules of `services` (default: every service) are importable."""
    missing = [] if _installed("ferry.runtime") else ["ferry.runtime"]
    if not missing:
        from ferry.runtime.launcher import MODULES

        wanted = MODULES if services is None else {s: MODULES[s] for s in services}
        missing = [module for module in wanted.values() if not _installed(module)]
    if missing:
        fail(f"{command} needs Ferry's server packages ({', '.join(missing)} missing): {INSTALL}")
        raise typer.Exit(EXIT_FAILED)
