"""`ferry-broker-store -c broker.conf --set key=value`: the broker's store process."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ferry.protocol.errors import ConfigError
from ferry.runtime.allocator import keep_freed_memory
from ferry.runtime.cli import parse_service_args
from ferry.runtime.config import BrokerConfig, load_config, parse_overrides
from ferry.runtime.dir_lock import DirLockedError
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry
from ferry.store.app import SERVICE_NAME, run
from ferry.store.retention import check_retention_config

PROG = "ferry-broker-store"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_service_args(PROG, argv)
    setup_logging(SERVICE_NAME, args.log_level)
    try:
        config = load_config(BrokerConfig, args.conf_file, parse_overrides(args.overrides))
        check_retention_config(config)
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    setup_telemetry(PROG, config)
    keep_freed_memory()
    try:
        run(config)
    except DirLockedError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
