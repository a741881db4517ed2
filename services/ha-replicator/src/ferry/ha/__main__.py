"""`ferry-ha-replicator -c broker.conf [--set key=value ...]`: a broker group's replicator."""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from ferry.ha.app import SERVICE_NAME, HaApp
from ferry.ha.config import HaConfig
from ferry.runtime.cli import run_service

PROG = "ferry-ha-replicator"


def _cannot_listen(config: HaConfig, exc: Exception) -> str:
    return f"cannot listen on {config.listen_endpoint()}: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        HaConfig,
        lambda config: HaApp(config).run(),
        argv,
        expected=(zmq.ZMQError,),
        explain=_cannot_listen,
    )


if __name__ == "__main__":
    main()
