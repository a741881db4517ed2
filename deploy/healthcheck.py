#!/usr/bin/env python3
"""`ferry-healthcheck SERVICE ENDPOINT`: the containers' health probe (exit 0 when healthy).

The console is healthy when its /healthz URL answers 200; etcd (its own container in the `ha`
profile) when its /health URL answers 200 with health "true", that is when it has a leader;
the gRPC proxy (`proxy host:port`) when its HTTP/2 channel comes up.

A service is healthy when it answers a ping with its name (namesrv, broker-store, and any
service built on ferry.runtime's loop). broker-remoting is healthy when it answers a
runtime-info request with its store's offsets, that is when the whole broker group serves.
Installed in the image as /opt/ferry/bin/ferry-healthcheck; light enough to run every few
seconds (no CLI framework, one socket, one request).

With security on (the `secure` profile), the probe reads the security keys from the same
FERRY_<key> variables as the container's service (authenticationEnabled,
innerClientAuthenticationCredentials, tlsEnable, tlsServerKeyFile, tlsInternalKeyFile): it
signs as the cluster's own services and connects with the internal CURVE key, which every port
admits. Without those variables it asks unsigned and in clear, as before.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import zmq

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    BrokerRuntimeInfoReply,
    GetBrokerRuntimeInfoRequest,
    PingRequest,
    PongReply,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.config import load_config
from ferry.runtime.security import settings
from ferry.runtime.security.config import SecurityConfig

TIMEOUT_MS = 8000  # remoting waits up to 5 s for its store before answering


def check_http(url: str, want: bytes = b"") -> str:
    """'' when url answers 200 (with `want` in its body, if given)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_MS / 1000) as response:  # noqa: S310
            if response.status != 200:
                return f"{url} answered {response.status}"
            body = response.read()
            return "" if want in body else f"{url} answered {body[:200]!r}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


class Asker:
    """One request, signed and encrypted as the container's service would (when it does)."""

    def __init__(self) -> None:
        settings.configure(load_config(SecurityConfig))  # the FERRY_<key> variables only
        self.credentials: Credentials | None = settings.inner_credentials()
        self.curve: CurveClient | None = settings.curve_client()

    def __call__(self, endpoint: str, body: AnyRequest) -> AnyReply | None:
        with BlockingClient(endpoint, credentials=self.credentials, curve=self.curve) as client:
            answer = client.call(body, TIMEOUT_MS)
        return None if answer is None else answer[0]


def check_grpc(target: str) -> str:
    """'' when a gRPC channel to host:port becomes ready (the HTTP/2 handshake done)."""
    import grpc  # only the proxy's probe pays for it

    with grpc.insecure_channel(target) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT_MS / 1000)
        except grpc.FutureTimeoutError:
            return f"no gRPC channel to {target} within {TIMEOUT_MS / 1000:.0f} s"
    return ""


def check(service: str, endpoint: str) -> str:
    """Returns '' when healthy, else why not."""
    if service == "proxy":
        return check_grpc(endpoint)
    if service == "console":
        return check_http(endpoint)
    if service == "etcd":  # http://host:port/health: {"health":"true"} once it has a leader
        return check_http(endpoint, b'"true"')
    ask = Asker()
    if service == "broker-remoting":
        reply = ask(endpoint, GetBrokerRuntimeInfoRequest())
        if not isinstance(reply, BrokerRuntimeInfoReply):
            return f"no runtime info from {endpoint}: {reply!r}"
        if "commitLogMaxOffset" not in reply.info:
            status = reply.info.get("storeStatus", "")
            return f"broker-remoting answers but its store does not: {status}"
        return ""
    reply = ask(endpoint, PingRequest())
    if not isinstance(reply, PongReply):
        return f"no pong from {endpoint}: {reply!r}"
    if reply.service != service:
        return f"{endpoint} is {reply.service}, not {service}"
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: ferry-healthcheck SERVICE ENDPOINT (e.g. namesrv tcp://127.0.0.1:9876)")
        return 2
    try:
        problem = check(argv[0], argv[1])
    except (zmq.ZMQError, ValueError, FerryError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(problem)
        return 1
    print("healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
