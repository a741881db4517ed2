"""`ferry serve <service>`: one service (or the whole broker group) from a broker.conf.

ferry.runtime and the services (the `ferry[server]` extra) are imported when it runs."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from ferry.cli.output import EXIT_USAGE, fail
from ferry.cli.server import require_server
from ferry.protocol.errors import FerryError

BROKER_GROUP = ("broker-store", "index", "scheduler", "ha-replicator", "broker-remoting")


def serve(
    service: Annotated[
        str,
        typer.Argument(
            metavar="SERVICE",
            help="namesrv | broker | broker-store | broker-remoting | "
            "ha-replicator | index | scheduler",
        ),
    ],
    conf: Annotated[Path | None, typer.Option("-c", "--conf", help="broker.conf")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="override one broker.conf key"),
    ] = None,
) -> None:
    """Run a service in the foreground (`broker` runs the broker group's services together)."""
    overrides = set_ or []
    if service == "broker":
        require_server("ferry serve broker", BROKER_GROUP)
        _serve_broker(conf, overrides)
        return
    require_server(f"ferry serve {service}", ())
    from ferry.runtime.launcher import MODULES

    module = MODULES.get(service)
    if module is None:
        fail(f"unknown service {service!r}")
        raise typer.Exit(EXIT_USAGE)
    require_server(f"ferry serve {service}", (service,))
    args = [sys.executable, "-m", module]
    if conf:
        args += ["-c", str(conf)]
    for item in overrides:
        args += ["--set", item]
    os.execv(sys.executable, args)


def _serve_broker(conf: Path | None, overrides: list[str]) -> None:
    from ferry.runtime.config import BrokerConfig, load_config, parse_overrides
    from ferry.runtime.launcher import LineRelay, LocalCluster, start_broker_services

    relay = LineRelay()
    try:
        parsed = parse_overrides(overrides)
        config = load_config(BrokerConfig, conf, parsed)
        stop = threading.Event()

        def on_signal(_signum: int, _frame: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        cluster = LocalCluster()
        start_broker_services(
            cluster,
            str(config.store_root),
            namesrv_addr=config.namesrv_addr,
            broker_port=config.listen_port,
            conf_file=str(conf) if conf else None,
            overrides=parsed,
            sink=relay.service_line,
            store_endpoint=config.store_endpoint or "tcp://127.0.0.1:0",
        )
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(1) from None
    relay.write(f"READY broker addr={cluster.broker_addr}")
    try:
        while not stop.wait(0.5):
            if any(not sp.alive() for sp in cluster.processes):
                fail("a broker service exited; stopping the broker")
                break
    finally:
        cluster.stop()
