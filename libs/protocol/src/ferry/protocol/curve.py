"""CURVE encryption of ZeroMQ connections (tlsEnable, issue 27): the client side.

A cluster has one server key pair (every service's bound sockets use it; clients are given its
public half, as a TLS client is given its CA) and one internal client key pair (the services'
own connections, which internal ports and feeds admit alone). Key files are ZeroMQ's
certificates (`ferry keys generate`); a secret key is read from its file and never printed.
A client without a key pair of its own gets a fresh one per process: it proves nothing, the
request signatures say who it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

from ferry.protocol.errors import ConfigError

SERVER_KEY = "server"  # server.key (public, for clients), server.key_secret (services only)
INTERNAL_KEY = "internal"  # internal.key, internal.key_secret (services only)


@dataclass(frozen=True)
class CurveClient:
    """What a connecting socket needs: the server's public key and a key pair of its own."""

    server_public: bytes
    public: bytes
    secret: bytes = field(repr=False)

    def apply(self, sock: zmq.Socket[Any]) -> None:
        sock.curve_serverkey = self.server_public
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret


def _load(path: str | os.PathLike[str], secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret_key = zmq.auth.load_certificate(os.fspath(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the CURVE key file {path}: {exc}") from None
    if secret and not secret_key:
        raise ConfigError(f"{path} holds no secret key (give the .key_secret file)")
    return public, secret_key


def server_public_key(key: str | os.PathLike[str]) -> bytes:
    """A server's public key: a key file's path, or the 40-character key itself."""
    text = os.fspath(key)
    if len(text) == 40 and not Path(text).exists():
        return text.encode()
    return _load(text, secret=False)[0]


def key_pair(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    public, secret = _load(path, secret=True)
    assert secret is not None
    return public, secret


def client_for(server_key: str | os.PathLike[str] | bytes) -> CurveClient:
    """A client of the server with that public key, with a fresh key pair of its own."""
    server = server_key if isinstance(server_key, bytes) else server_public_key(server_key)
    public, secret = zmq.curve_keypair()
    return CurveClient(server, public, secret)
