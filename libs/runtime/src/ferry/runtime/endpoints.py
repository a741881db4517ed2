"""Endpoints as a service binds them and peers dial them, and the READY line."""

from __future__ import annotations

import os
from typing import Any

import zmq


def bind(sock: zmq.Socket[Any], endpoint: str) -> str:
    """Binds, turning a tcp port 0 into a free port; returns the endpoint actually bound."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        endpoint = endpoint[:-2] + ":*"
    if endpoint.startswith("ipc://"):
        os.makedirs(os.path.dirname(endpoint[len("ipc://") :]) or ".", exist_ok=True)
    sock.bind(endpoint)
    last = sock.getsockopt(zmq.LAST_ENDPOINT)
    return last.decode() if isinstance(last, bytes) else str(last)


def dial_address(endpoint: str) -> str:
    """A bound tcp endpoint as the host:port peers dial: 'tcp://0.0.0.0:9876' ->
    '127.0.0.1:9876' (a wildcard host is this machine's loopback)."""
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    if host in ("0.0.0.0", "*", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def announce_ready(name: str, **endpoints: str) -> None:
    """The one machine-readable line a launcher waits for."""
    fields = " ".join(f"{k}={v}" for k, v in endpoints.items())
    print(f"READY {name} {fields}".rstrip(), flush=True)
