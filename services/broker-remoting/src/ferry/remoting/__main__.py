"""`ferry-broker-remoting -c broker.conf [--set key=value ...]`: the client-facing broker."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.remoting.app import SERVICE_NAME, RemotingApp
from ferry.runtime.cli import run_service
from ferry.runtime.config import BrokerConfig

PROG = "ferry-broker-remoting"


def main(argv: Sequence[str] | None = None) -> None:
    # RemotingApp refuses a config it cannot serve (no storeEndpoint, an unreadable state
    # file) with a ConfigError: exit 2; a port in use is reported by run() itself: exit 1
    run_service(PROG, SERVICE_NAME, BrokerConfig, lambda config: RemotingApp(config).run(), argv)


if __name__ == "__main__":
    main()
