"""The CLI's credentials: `--access-key` / `--secret-key` anywhere on the command line, or
FERRY_ACCESS_KEY / FERRY_SECRET_KEY; with tlsEnable, `--tls-server-key` or
FERRY_TLS_SERVER_KEY, the cluster's server.key (issue 27).

The flags are taken off the command line before typer parses it, so that every command (admin,
produce, consume, query) takes them in any position, as the variables are taken by all.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferry.client import Credentials

ACCESS_ENV = "FERRY_ACCESS_KEY"
SECRET_ENV = "FERRY_SECRET_KEY"  # noqa: S105 - a variable's name, not a secret
TLS_ENV = "FERRY_TLS_SERVER_KEY"
FLAGS = {
    "--access-key": ACCESS_ENV,
    "--accessKey": ACCESS_ENV,
    "--secret-key": SECRET_ENV,
    "--secretKey": SECRET_ENV,
    "--tls-server-key": TLS_ENV,
}


def lift(argv: list[str]) -> list[str]:
    """argv without the credential flags, whose values go to the environment."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in FLAGS and arg != "--":
            if not eq:
                if i + 1 >= len(argv):
                    raise SystemExit(f"ferry: {name} needs a value")
                value = argv[i + 1]
                i += 1
            os.environ[FLAGS[name]] = value
        else:
            out.append(arg)
        i += 1
    return out


def credentials() -> Credentials | None:
    """None when neither is given; both or neither."""
    access, secret = os.environ.get(ACCESS_ENV, ""), os.environ.get(SECRET_ENV, "")
    if not access and not secret:
        return None
    if not access or not secret:
        raise SystemExit(
            "ferry: give both an access key and a secret key "
            f"(--access-key/--secret-key or {ACCESS_ENV}/{SECRET_ENV})"
        )
    from ferry.client import Credentials

    return Credentials(access, secret)


def client_options() -> dict[str, Any]:
    """What every client the CLI makes is given: credentials and the cluster's CURVE key."""
    return {"credentials": credentials(), "tls_server_key": os.environ.get(TLS_ENV) or None}
