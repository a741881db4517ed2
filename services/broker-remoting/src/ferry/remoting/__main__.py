"""`ferry-broker-remoting -c broker.conf [--set key=value ...]`: the client-facing broker."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ferry.protocol.errors import ConfigError
from ferry.remoting.app import SERVICE_NAME, RemotingApp
from ferry.runtime.allocator import keep_freed_memory
from ferry.runtime.cli import parse_service_args
from ferry.runtime.config import BrokerConfig, load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

PROG = "ferry-broker-remoting"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_service_args(PROG, argv)
    setup_logging(SERVICE_NAME, args.log_level)
    try:
        config = load_config(BrokerConfig, args.conf_file, parse_overrides(args.overrides))
        app = RemotingApp(config)
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    setup_telemetry(PROG, config)
    keep_freed_memory()
    try:
        code = app.run()
    finally:
        shutdown_telemetry()
    sys.exit(code)


if __name__ == "__main__":
    main()
