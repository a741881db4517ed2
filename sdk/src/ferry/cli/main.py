"""The `ferry` command and the RocketMQ-habit aliases mqadmin, mqnamesrv, mqbroker,
mqcontroller, mqproxy.

Start-up is mostly imports (issue 24.6): nothing heavy is imported here or at the top of the
command modules (the client, zmq, msgspec, rich, OpenTelemetry and ferry.runtime are imported
by the commands that use them), and help is click's plain text rather than rich's panels.
"""

from __future__ import annotations

import os
import sys

import typer

from ferry.cli import (
    admin,
    admin_auth,  # noqa: F401  (registers its commands on admin.app)
    admin_broker,  # noqa: F401  (registers its commands on admin.app)
    admin_consume,  # noqa: F401  (registers its commands on admin.app)
    admin_controller,  # noqa: F401  (registers its commands on admin.app)
    admin_groups,  # noqa: F401  (registers its commands on admin.app)
    admin_messages,  # noqa: F401  (registers its commands on admin.app)
    admin_namesrv,  # noqa: F401  (registers its commands on admin.app)
    admin_progress,  # noqa: F401  (registers its commands on admin.app)
    admin_scheduler,  # noqa: F401  (registers its commands on admin.app)
    admin_topics,  # noqa: F401  (registers its commands on admin.app)
    admin_trace,  # noqa: F401  (registers its commands on admin.app)
    credentials,
    dev,
    keys,
    query,  # noqa: F401  (registers its commands on admin.app)
)
from ferry.cli.groups import CaseInsensitiveGroup
from ferry.cli.serve import serve

app = typer.Typer(
    cls=CaseInsensitiveGroup,
    no_args_is_help=True,
    help="Ferry: a RocketMQ-style message queue.",
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
app.add_typer(dev.app, name="dev")
app.add_typer(admin.app, name="admin")
app.add_typer(keys.app, name="keys")
app.command("serve")(serve)

# the OTEL_* variables that ask for exported traces (as ferry.client.tracing_setup reads them)
TRACES_ASKED = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def _trace_if_asked(service_name: str) -> None:
    """The CLI's own clients (admin commands, dev tools) are traced like any application's
    when the OTEL_* variables ask for it; the SDK and exporter are imported only then."""
    if any(os.environ.get(key) for key in TRACES_ASKED):
        from ferry.client.tracing_setup import enable_from_environment

        enable_from_environment(service_name)


def main() -> None:
    sys.argv = credentials.lift(sys.argv)
    _trace_if_asked("ferry-cli")
    app()


def mqadmin() -> None:
    sys.argv = credentials.lift(sys.argv)
    _trace_if_asked("mqadmin")
    admin.app(prog_name="mqadmin")


def mqnamesrv() -> None:
    sys.argv = [sys.argv[0], "serve", "namesrv", *sys.argv[1:]]
    app(prog_name="mqnamesrv")


def mqbroker() -> None:
    sys.argv = [sys.argv[0], "serve", "broker", *sys.argv[1:]]
    app(prog_name="mqbroker")


def mqcontroller() -> None:
    sys.argv = [sys.argv[0], "serve", "controller", *sys.argv[1:]]
    app(prog_name="mqcontroller")


def mqproxy() -> None:
    sys.argv = [sys.argv[0], "serve", "proxy", *sys.argv[1:]]
    app(prog_name="mqproxy")
