"""`ferry-namesrv` / `python -m ferry.namesrv`: -c broker.conf, --set key=value."""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from ferry.namesrv.app import SERVICE_NAME, NamesrvApp
from ferry.runtime.cli import run_service
from ferry.runtime.config import NamesrvConfig

PROG = "ferry-namesrv"


def _cannot_listen(config: NamesrvConfig, exc: Exception) -> str:
    return f"cannot listen on {config.listen_host}:{config.listen_port}: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        NamesrvConfig,
        lambda config: NamesrvApp(config).run(),
        argv,
        expected=(zmq.ZMQError,),
        explain=_cannot_listen,
    )


if __name__ == "__main__":
    main()
