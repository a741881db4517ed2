"""The `ferry` command and the RocketMQ-habit aliases mqadmin, mqnamesrv, mqbroker."""

from __future__ import annotations

import sys

import typer

from ferry.cli import (
    admin,
    admin_broker,  # noqa: F401  (registers its commands on admin.app)
    admin_groups,  # noqa: F401  (registers its commands on admin.app)
    admin_messages,  # noqa: F401  (registers its commands on admin.app)
    admin_scheduler,  # noqa: F401  (registers its commands on admin.app)
    admin_topics,  # noqa: F401  (registers its commands on admin.app)
    dev,
    query,  # noqa: F401  (registers its commands on admin.app)
)
from ferry.cli.groups import CaseInsensitiveGroup
from ferry.cli.serve import serve
from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

app = typer.Typer(
    cls=CaseInsensitiveGroup,
    no_args_is_help=True,
    help="Ferry: a RocketMQ-style message queue.",
    pretty_exceptions_show_locals=False,
)
app.add_typer(dev.app, name="dev")
app.add_typer(admin.app, name="admin")
app.command("serve")(serve)


def main() -> None:
    # the CLI's own clients (admin commands, dev tools) are traced like any application's
    setup_telemetry("ferry-cli")
    try:
        app()
    finally:
        shutdown_telemetry()


def mqadmin() -> None:
    setup_telemetry("mqadmin")
    try:
        admin.app(prog_name="mqadmin")
    finally:
        shutdown_telemetry()


def mqnamesrv() -> None:
    sys.argv = [sys.argv[0], "serve", "namesrv", *sys.argv[1:]]
    app(prog_name="mqnamesrv")


def mqbroker() -> None:
    sys.argv = [sys.argv[0], "serve", "broker", *sys.argv[1:]]
    app(prog_name="mqbroker")
