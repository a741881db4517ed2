"""The channel of a `ferry serve broker` tree (ferry.runtime.tree_channel): what its broker
agent asks of the supervisor, and that with authentication it is an internal port like the
others (test_security_refusals' matrix, for every request type of the protocol)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from itest_support import wait_for
from security_support import INNER, SECURITY, sample

from ferry.protocol.auth import Credentials
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    ErrorReply,
    OkReply,
    TreeReconfigureRequest,
    TreeStatusReply,
    TreeStatusRequest,
    request_types,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.launcher import LocalCluster, service_args, start_service
from ferry.runtime.security import settings
from ferry.runtime.security.config import SecurityConfig
from ferry.runtime.supervisor import RestartPolicy, Supervisor
from ferry.runtime.tree_channel import TreeChannel

pytestmark = pytest.mark.integration

USER = Credentials("nobody", "nobody-secret-0123")
INNER_WRONG = Credentials(INNER.access_key, "not-the-secret")
TIMEOUT_MS = 5000


def ask(endpoint: str, body: Any, creds: Credentials | None = None) -> Any:
    with BlockingClient(endpoint, credentials=creds) as client:
        answer = client.call(body, TIMEOUT_MS)
    assert answer is not None, f"{endpoint} did not answer {type(body).__name__}"
    return answer[0]


@pytest.fixture
def tree() -> Iterator[tuple[LocalCluster, Supervisor, TreeChannel]]:
    namesrv = start_service("namesrv", service_args(None, {"listenPort": "0"}))
    cluster = LocalCluster([namesrv], broker_addr="127.0.0.1:1", ha_addr="127.0.0.1:2")
    supervisor = Supervisor(cluster, policy=RestartPolicy(), say=lambda _line: None)
    channel = TreeChannel(cluster, supervisor)
    channel.start()
    stop = threading.Event()
    running = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    running.start()
    try:
        yield cluster, supervisor, channel
    finally:
        stop.set()
        running.join(5)
        cluster.stop()
        channel.stop()


def test_the_agent_learns_the_tree_and_restarts_a_service_through_it(
    tree: tuple[LocalCluster, Supervisor, TreeChannel],
) -> None:
    cluster, _, channel = tree
    status = ask(channel.endpoint, TreeStatusRequest())
    assert isinstance(status, TreeStatusReply)
    assert (status.broker_addr, status.ha_addr) == ("127.0.0.1:1", "127.0.0.1:2")
    [first] = status.processes
    assert (first.name, first.pid, first.announced, first.alive) == (
        "namesrv",
        cluster.processes[0].pid,
        True,
        True,
    )
    port = cluster.processes[0].endpoints["addr"].rpartition(":")[2]
    change = TreeReconfigureRequest(service="namesrv", settings={"listenPort": port})
    assert isinstance(ask(channel.endpoint, change), OkReply)

    def restarted() -> bool:
        now = ask(channel.endpoint, TreeStatusRequest()).processes[0]
        return bool(now.pid != first.pid and now.announced and now.alive)

    wait_for(restarted, timeout=30, what="namesrv restarted by the supervisor")
    assert cluster.processes[0].args[-2:] == ["--set", f"listenPort={port}"]


@pytest.fixture
def secure_channel() -> Iterator[str]:
    settings.configure(msgspec.convert(SECURITY, SecurityConfig, strict=False))
    cluster = LocalCluster()
    channel = TreeChannel(cluster, Supervisor(cluster, say=lambda _line: None))
    try:
        yield channel.start()
    finally:
        channel.stop()
        settings.reset()


def test_with_authentication_the_channel_serves_only_the_cluster(secure_channel: str) -> None:
    assert isinstance(ask(secure_channel, TreeStatusRequest(), INNER), TreeStatusReply)
    failures = []
    for request_type in request_types():
        body = sample(request_type)
        for creds, expected in (
            (None, ResponseCode.AUTH_NO_CREDENTIALS),
            (USER, ResponseCode.NO_PERMISSION),  # an internal port knows no users
            (INNER_WRONG, ResponseCode.AUTH_BAD_SIGNATURE),
        ):
            reply = ask(secure_channel, body, creds)
            code = reply.code if isinstance(reply, ErrorReply) else 0
            if code != expected:
                who = creds.access_key if creds else "no credentials"
                failures.append(f"{request_type.__name__} as {who}: {reply}")
    assert failures == []
