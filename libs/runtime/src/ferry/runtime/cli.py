"""What every service's main() shares: -c file, --set key=value, and the start-up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from ferry.protocol.errors import ConfigError
from ferry.runtime.allocator import keep_freed_memory
from ferry.runtime.config import C, load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.security import settings
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry


@dataclass(frozen=True)
class Flag:
    """A service's own command-line flag that sets one config key (the console's --port sets
    listenPort); it wins over --set and the config file."""

    names: tuple[str, ...]
    key: str
    help: str
    type: Callable[[str], object] = str


@dataclass(frozen=True)
class ServiceArgs:
    conf_file: str | None
    overrides: list[str]
    log_level: str | None
    flags: dict[str, str] = field(default_factory=dict)  # config key -> value given


def parse_service_args(
    prog: str,
    argv: Sequence[str] | None = None,
    flags: Sequence[Flag] = (),
    description: str | None = None,
) -> ServiceArgs:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-c", "--conf", dest="conf_file", help="config file (Java properties)")
    for flag in flags:
        metavar = flag.names[-1].lstrip("-").upper().replace("-", "_")  # --data-dir: DATA_DIR
        parser.add_argument(
            *flag.names, dest=flag.key, type=flag.type, metavar=metavar, help=flag.help
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key (repeatable)",
    )
    parser.add_argument("--log-level", default=None)
    ns = parser.parse_args(argv)
    given = {f.key: getattr(ns, f.key) for f in flags}
    return ServiceArgs(
        ns.conf_file,
        list(ns.overrides),
        ns.log_level,
        {key: str(value) for key, value in given.items() if value is not None},
    )


def run_service(
    prog: str,
    service_name: str,
    config_type: type[C],
    run: Callable[[C], int | None],
    argv: Sequence[str] | None = None,
    *,
    expected: tuple[type[Exception], ...] = (),
    explain: Callable[[C, Exception], str] | None = None,
    flags: Sequence[Flag] = (),
    description: str | None = None,
    allocator_thresholds: bool = True,
) -> None:
    """The main() of a service: arguments, logging, config, telemetry, the allocator's
    thresholds (runtime.allocator; `allocator_thresholds=False` leaves them), then
    run(config), whose int result is the exit code.

    A ConfigError, from the config or from the service refusing it as it starts (a state file
    it cannot read), exits 2 with one line; an `expected` error (a locked directory, a port in
    use) exits 1 with one line, explained by `explain` or by the error's own message."""
    args = parse_service_args(prog, argv, flags, description)
    setup_logging(service_name, args.log_level)
    try:
        overrides = parse_overrides(args.overrides)
        overrides.update(args.flags)
        config = load_config(config_type, args.conf_file, overrides)
    except ConfigError as exc:
        _exit(prog, exc.message, 2)
    settings.configure(config)  # every Service this process makes signs and checks with it
    setup_telemetry(prog, config)
    if allocator_thresholds:
        keep_freed_memory()
    try:
        code = run(config)
    except ConfigError as exc:
        _exit(prog, exc.message, 2)
    except expected as exc:
        _exit(prog, explain(config, exc) if explain else getattr(exc, "message", str(exc)), 1)
    finally:
        shutdown_telemetry()
    if code:
        sys.exit(code)


def _exit(prog: str, message: str, code: int) -> NoReturn:
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(code)
