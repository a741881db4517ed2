"""`ferry-index -c broker.conf [--set key=value ...]`: the broker's index service."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ferry.index.app import SERVICE_NAME, IndexApp
from ferry.index.config import IndexConfig
from ferry.index.dir_lock import IndexLockedError
from ferry.protocol.errors import ConfigError
from ferry.runtime.cli import parse_service_args
from ferry.runtime.config import load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

PROG = "ferry-index"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_service_args(PROG, argv)
    setup_logging(SERVICE_NAME, args.log_level)
    try:
        config = load_config(IndexConfig, args.conf_file, parse_overrides(args.overrides))
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    setup_telemetry(PROG)
    try:
        app = IndexApp(config)
        app.run()
    except IndexLockedError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
