"""`ferry keys generate`: the CURVE key files of a cluster with tlsEnable (issue 27).

server.key / server.key_secret: every service's bound sockets; clients get server.key.
internal.key / internal.key_secret: the services' connections to one another; internal ports
and feeds admit this key alone. The secret files are made readable by their owner only and
their contents are never printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.groups import CaseInsensitiveGroup
from ferry.cli.output import print_table

app = typer.Typer(
    cls=CaseInsensitiveGroup,
    no_args_is_help=True,
    help="CURVE keys for tlsEnable (broker.conf tlsServerKeyFile, tlsInternalKeyFile).",
    rich_markup_mode=None,
)

NAMES = ("server", "internal")


@app.command("generate")
def generate(
    directory: Annotated[Path, typer.Argument(help="where the key files go")] = Path("keys"),
    force: Annotated[bool, typer.Option("--force", help="replace existing key files")] = False,
) -> None:
    """Make server and internal key pairs in DIRECTORY."""
    import zmq.auth

    directory.mkdir(parents=True, exist_ok=True)
    existing = [n for n in NAMES if (directory / f"{n}.key_secret").exists()]
    if existing and not force:
        typer.echo(
            f"ferry keys: {directory} already holds {', '.join(existing)} keys "
            "(--force replaces them; every service and client then needs the new ones)",
            err=True,
        )
        raise typer.Exit(1)
    rows = []
    for name in NAMES:
        public, secret = zmq.auth.create_certificates(str(directory), name)
        os.chmod(secret, 0o600)
        rows.append((name, public, secret))
    print_table(
        f"CURVE keys in {directory}",
        ["pair", "public key file (give clients server's)", "secret key file (services only)"],
        rows,
    )
