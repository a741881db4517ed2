"""The command line every service's main() shares: -c broker.conf, --set key=value."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass


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
