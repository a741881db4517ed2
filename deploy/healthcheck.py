#!/usr/bin/env python3
"""`ferry-healthcheck SERVICE ENDPOINT`: the containers' health probe (exit 0 when healthy).

The console is healthy when its /healthz URL answers 200.

A service is healthy when it answers a ping with its name (namesrv, broker-store, and any
service built on ferry.runtime's loop). broker-remoting is healthy when it answers a
runtime-info request with its store's offsets, that is when the whole broker group serves.
Installed in the image as /opt/ferry/bin/ferry-healthcheck; light enough to run every few
seconds (no CLI framework, one socket, one request).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import zmq

from ferry.protocol.messages import (
    BrokerRuntimeInfoReply,
    GetBrokerRuntimeInfoRequest,
    PingRequest,
    PongReply,
)
from ferry.protocol.rpc import ask

TIMEOUT_MS = 8000  # remoting waits up to 5 s for its store before answering


def check_http(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_MS / 1000) as response:  # noqa: S310
            return "" if response.status == 200 else f"{url} answered {response.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


def check(service: str, endpoint: str) -> str:
    """Returns '' when healthy, else why not."""
    if service == "console":
        return check_http(endpoint)
    if service == "broker-remoting":
        reply = ask(endpoint, GetBrokerRuntimeInfoRequest(), TIMEOUT_MS)
        if not isinstance(reply, BrokerRuntimeInfoReply):
            return f"no runtime info from {endpoint}: {reply!r}"
        if "commitLogMaxOffset" not in reply.info:
            status = reply.info.get("storeStatus", "")
            return f"broker-remoting answers but its store does not: {status}"
        return ""
    reply = ask(endpoint, PingRequest(), TIMEOUT_MS)
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
    except (zmq.ZMQError, ValueError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(problem)
        return 1
    print("healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
