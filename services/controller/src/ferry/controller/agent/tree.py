"""What the agent reaches on its own host: the tree's supervisor (its channel) and the broker
group's services, each asked as the cluster's own (signed, and CURVE with tlsEnable)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import zmq

from ferry.protocol.errors import ConfigError
from ferry.protocol.messages import (
    AnyRequest,
    OkReply,
    TreeReconfigureRequest,
    TreeStatusReply,
    TreeStatusRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.config import BrokerConfig
from ferry.runtime.security.curve import internal_client

log = logging.getLogger("ferry.broker_agent")

LOCAL_TIMEOUT_MS = 500  # the group's own services, on this host
# a role change must not be lost: the supervisor answers from a thread of its own, at once
RECONFIGURE_TIMEOUT_MS = 2000
START_TIMEOUT_S = 10.0  # the channel is up before the agent starts: this is a broken tree


class Tree:
    def __init__(self, channel: str, config: BrokerConfig) -> None:
        self.channel = channel
        self.ctx: zmq.Context[Any] = zmq.Context()
        # the controller and the tree's services take requests only from the cluster itself
        self.credentials = config.inner_credentials() if config.authentication_enabled else None
        self.curve = (
            internal_client(config.server_key_pair()[0], config.internal_key_pair())
            if config.tls_enable
            else None
        )
        self.broker_addr = self.ha_addr = self.store_endpoint = ""

    def client(self, endpoint: str) -> BlockingClient:
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        return BlockingClient(endpoint, self.ctx, credentials=self.credentials, curve=self.curve)

    def call(self, endpoint: str, request: AnyRequest, timeout_ms: int = LOCAL_TIMEOUT_MS) -> Any:
        """The reply (None: no answer in time, or no endpoint)."""
        if not endpoint:
            return None
        with self.client(endpoint) as client:
            answer = client.call(request, timeout_ms)
        return None if answer is None else answer[0]

    def start(self) -> None:
        """Learns the group's endpoints from the supervisor (pinned across restarts)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while (status := self.status()) is None:
            if time.monotonic() > deadline:
                raise ConfigError(f"the tree's supervisor does not answer at {self.channel}")
        self.broker_addr = status.broker_addr
        self.ha_addr = status.ha_addr
        self.store_endpoint = status.store_endpoint

    def status(self) -> TreeStatusReply | None:
        reply = self.call(self.channel, TreeStatusRequest())
        return reply if isinstance(reply, TreeStatusReply) else None

    def reconfigure(self, name: str, settings: Mapping[str, str]) -> None:
        request = TreeReconfigureRequest(service=name, settings=dict(settings))
        reply = self.call(self.channel, request, RECONFIGURE_TIMEOUT_MS)
        if not isinstance(reply, OkReply):
            log.error("the tree's supervisor did not take %s: %s", request, reply)

    def close(self) -> None:
        self.ctx.destroy(linger=0)
