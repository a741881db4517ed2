"""`ferry-controller` / `python -m ferry.controller` (`ferry serve controller`, mqcontroller):
-c controller.conf, --set key=value."""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from ferry.controller.app import SERVICE_NAME, ControllerApp
from ferry.controller.config import ControllerConfig
from ferry.runtime.cli import run_service

PROG = "ferry-controller"


def _cannot_listen(config: ControllerConfig, exc: Exception) -> str:
    return f"cannot listen on {config.listen_host}:{config.controller_listen_port}: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        ControllerConfig,
        lambda config: ControllerApp(config).run(),
        argv,
        expected=(zmq.ZMQError,),
        explain=_cannot_listen,
    )


if __name__ == "__main__":
    main()
