"""What every service's main() shares: -c broker.conf, --set key=value, and the start-up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ferry.protocol.errors import ConfigError
from ferry.runtime.allocator import keep_freed_memory
from ferry.runtime.config import C, load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry


@dataclass(frozen=True)
class ServiceArgs:
    conf_file: str | None
    overrides: list[str]
    log_level: str | None


def parse_service_args(prog: str, argv: Sequence[str] | None = None) -> ServiceArgs:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("-c", "--conf", dest="conf_file", help="broker.conf (Java properties)")
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
    return ServiceArgs(ns.conf_file, list(ns.overrides), ns.log_level)


def run_service(
    prog: str,
    service_name: str,
    config_type: type[C],
    run: Callable[[C], object],
    argv: Sequence[str] | None = None,
    *,
    expected: tuple[type[Exception], ...] = (),
    explain: Callable[[C, Exception], str] | None = None,
) -> None:
    """The main() of a service: arguments, logging, config (exit 2 on a bad one), telemetry,
    the allocator's thresholds (runtime.allocator), then run(config); an `expected` error
    (a locked directory, a port in use) exits 1 with one line, explained by `explain` or by
    the error's own message."""
    args = parse_service_args(prog, argv)
    setup_logging(service_name, args.log_level)
    try:
        config = load_config(config_type, args.conf_file, parse_overrides(args.overrides))
    except ConfigError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    setup_telemetry(prog, config)
    keep_freed_memory()
    try:
        run(config)
    except expected as exc:
        message = explain(config, exc) if explain else getattr(exc, "message", str(exc))
        print(f"{prog}: {message}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutdown_telemetry()
