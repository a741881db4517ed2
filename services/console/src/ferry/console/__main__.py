"""`ferry-console [-n NAMESRV] [--host H] [--port P] [--data-dir D] [-c file] [--set k=v]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ferry.console.app import SERVICE_NAME, ConsoleApp
from ferry.console.config import ConsoleConfig
from ferry.protocol.errors import ConfigError
from ferry.runtime.config import load_config, parse_overrides
from ferry.runtime.logs import setup_logging
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

PROG = "ferry-console"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description="Ferry's web console")
    parser.add_argument("-c", "--conf", dest="conf_file", help="properties file of console keys")
    parser.add_argument("-n", "--namesrv", help="name server(s), host:port;... (namesrvAddr)")
    parser.add_argument("--host", help="listen host (listenHost, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any free (listenPort, 8080)")
    parser.add_argument("--data-dir", help="where the trace store lives (consoleDataDir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--log-level", default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging(SERVICE_NAME, args.log_level)
    try:
        overrides = parse_overrides(args.overrides)
        flags = {
            "namesrvAddr": args.namesrv,
            "listenHost": args.host,
            "listenPort": None if args.port is None else str(args.port),
            "consoleDataDir": args.data_dir,
        }
        overrides.update({k: v for k, v in flags.items() if v is not None})
        config = load_config(ConsoleConfig, args.conf_file, overrides)
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    setup_telemetry(PROG, config)
    try:
        ConsoleApp(config).run()
    except OSError as exc:
        print(
            f"{PROG}: cannot serve on {config.listen_host}:{config.listen_port}: {exc}",
            file=sys.stderr,
        )
        sys.exit(1)
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
