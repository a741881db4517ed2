"""`ferry dev up`: the embedded local cluster, in the foreground."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from ferry.cli.output import fail
from ferry.protocol.errors import FerryError
from ferry.runtime.config import parse_overrides
from ferry.runtime.launcher import start_local_cluster

app = typer.Typer(no_args_is_help=True, help="Run Ferry locally.")


def _print_line(name: str, line: str) -> None:
    print(f"{name:>16} | {line}", flush=True)


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where the store lives")] = Path(
        ".ferry"
    ),
    namesrv_port: Annotated[int, typer.Option(help="0 = any free port")] = 9876,
    broker_port: Annotated[int, typer.Option(help="0 = any free port")] = 10911,
    console_port: Annotated[int, typer.Option(help="0 = any free port")] = 8080,
    slave: Annotated[bool, typer.Option("--slave", help="add a slave broker group")] = False,
    conf: Annotated[
        Path | None, typer.Option("-c", "--conf", help="broker.conf overriding broker settings")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="override one broker.conf key: KEY=VALUE")
    ] = None,
) -> None:
    """Start a name server, a broker group and the console; stop cleanly on Ctrl-C or
    SIGTERM."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        cluster = start_local_cluster(
            str(data_dir.resolve()),
            namesrv_port=namesrv_port,
            broker_port=broker_port,
            conf_file=str(conf) if conf else None,
            overrides=parse_overrides(set_ or []),
            sink=_print_line,
            console_port=console_port,
            slave=slave,
        )
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(1) from None
    print(
        f"READY namesrv={cluster.namesrv_addr} console={cluster.console_url} "
        f"broker={cluster.broker_addr}",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            dead = [sp.name for sp in cluster.processes if not sp.alive()]
            if dead:
                fail(f"{', '.join(dead)} exited; stopping the cluster")
                break
    finally:
        cluster.stop()
    print("ferry dev: stopped", file=sys.stderr, flush=True)
