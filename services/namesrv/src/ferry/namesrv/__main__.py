"""`ferry-namesrv` / `python -m ferry.namesrv`: -c broker.conf, --set key=value."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import zmq

from ferry.namesrv.app import NamesrvApp
from ferry.protocol.errors import ConfigError
from ferry.runtime.allocator import keep_freed_memory
from ferry.runtime.cli import parse_service_args
from ferry.runtime.config import NamesrvConfig, load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

PROG = "ferry-namesrv"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_service_args(PROG, argv)
    setup_logging("namesrv", args.log_level)
    try:
        config = load_config(NamesrvConfig, args.conf_file, parse_overrides(args.overrides))
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    setup_telemetry(PROG, config)
    keep_freed_memory()
    try:
        app = NamesrvApp(config)
    except zmq.ZMQError as exc:
        print(
            f"{PROG}: cannot listen on {config.listen_host}:{config.listen_port}: {exc}",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    try:
        app.run()
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
