"""`ferry dev up`: the embedded local cluster, in the foreground.

Each service's output is relayed as `[service] line`; the one line with READY in it is the
cluster's, printed once every service serves and the broker has registered. ferry.runtime
(the `ferry[server]` extra) is imported only here, when the command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.output import fail
from ferry.cli.serve import on_signals, supervise
from ferry.cli.server import require_server
from ferry.protocol.errors import FerryError

app = typer.Typer(no_args_is_help=True, help="Run Ferry locally.", rich_markup_mode=None)


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where the store lives")] = Path(
        ".ferry"
    ),
    namesrv_port: Annotated[int, typer.Option(help="0 = any free port")] = 9876,
    rocketmq_port: Annotated[
        int,
        typer.Option(
            help="the name server address for RocketMQ's own clients (remoting protocol); "
            "0 = any free port, -1 = none"
        ),
    ] = 0,
    proxy_port: Annotated[
        int,
        typer.Option(
            help="the gRPC proxy for RocketMQ 5's clients (their endpoints); 0 = any free port, "
            "-1 = none"
        ),
    ] = 8081,
    broker_port: Annotated[int, typer.Option(help="0 = any free port")] = 10911,
    console_port: Annotated[int, typer.Option(help="0 = any free port")] = 8080,
    slave: Annotated[bool, typer.Option("--slave", help="add a slave broker group")] = False,
    ha: Annotated[
        bool,
        typer.Option(
            "--ha",
            help="controller mode: etcd, the controller and three replicas of broker-a, "
            "each its own `ferry serve broker` tree; the master is elected",
        ),
    ] = False,
    conf: Annotated[
        Path | None, typer.Option("-c", "--conf", help="broker.conf overriding broker settings")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="override one broker.conf key"),
    ] = None,
) -> None:
    """Start a name server, a broker group, the console and the gRPC proxy; restart any of
    them that exits (FERRY_RESTART_POLICY); stop them all cleanly on Ctrl-C or SIGTERM."""
    require_server("ferry dev up")
    from ferry.runtime.config import parse_overrides
    from ferry.runtime.launcher import LineRelay, start_local_cluster
    from ferry.runtime.supervisor import RestartPolicy

    relay = LineRelay()
    try:
        RestartPolicy.from_env()  # a bad FERRY_RESTART_POLICY fails before anything starts
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(1) from None
    stop = on_signals()
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        cluster = start_local_cluster(
            str(data_dir.resolve()),
            namesrv_port=namesrv_port,
            rocketmq_port=rocketmq_port if rocketmq_port >= 0 else None,
            proxy_port=proxy_port if proxy_port >= 0 else None,
            broker_port=broker_port,
            conf_file=str(conf) if conf else None,
            overrides=parse_overrides(set_ or []),
            sink=relay.service_line,
            console_port=console_port,
            slave=slave,
            ha=ha,
        )
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(1) from None
    controller = f" controller={cluster.controller_addr}" if cluster.controller_addr else ""
    rocketmq = f" rocketmq={cluster.rocketmq_addr}" if cluster.rocketmq_addr else ""
    proxy = f" proxy={cluster.proxy_addr}" if cluster.proxy_addr else ""
    relay.write(
        f"READY namesrv={cluster.namesrv_addr} console={cluster.console_url} "
        f"broker={cluster.broker_addr}{controller}{rocketmq}{proxy}"
    )
    try:
        supervise(cluster, stop, relay.write)
    finally:
        print("ferry dev: stopped", file=sys.stderr, flush=True)
