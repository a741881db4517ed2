"""The proxy's floor for bench/grpc_proxy.py: the proxy's own gRPC service (MessagingService,
its conversions and checks) with a producer that stores nothing and answers at once, and a
fixed route of 4 queues. What the client pays for gRPC and the proxy's Python, without the
cluster behind it. Runs with the workspace's python:

    python floor_server.py     (prints "READY floor grpc=HOST:PORT", stops at stdin's end)
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from ferry.client.message import Message, MessageQueue, SendResult
from ferry.client.route import TopicRoute
from ferry.protocol.codes import SendStatus
from ferry.proxy.convert import ServerSettings
from ferry.proxy.renew import Renewer, RenewPolicy
from ferry.proxy.service import MessagingService
from ferry.proxy.transactions import HalfProducer, Transactions

QUEUES = 4


class InstantSender:
    def __init__(self) -> None:
        self.offset = 0

    async def send(self, msg: Message) -> SendResult:
        self.offset += 1
        mq = MessageQueue(msg.topic, "floor", self.offset % QUEUES)
        return SendResult(SendStatus.SEND_OK, "", "", mq, self.offset)

    async def send_orderly(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        return await self.send(msg)


class FixedRoutes:
    async def route(self, topic: str) -> TopicRoute:
        queues = tuple(MessageQueue(topic, "floor", i) for i in range(QUEUES))
        return TopicRoute(topic, queues, queues, {"floor": "tcp://127.0.0.1:1"})


async def serve() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    settings = ServerSettings(max_body_size=4 << 20, consume_backoff_ms=(1000,), consume_attempts=2)
    popper: Any = None  # the floor serves producers only
    # never started: no transactional sends reach the floor
    transactions = Transactions(HalfProducer("127.0.0.1:1"))
    routes: Any = FixedRoutes()
    where = ("127.0.0.1", port)
    # nothing to renew: the floor has no consumers
    renewer = Renewer(popper, RenewPolicy(60_000, 10_000, 3 * 3600 * 1000))
    service = MessagingService(
        InstantSender(), popper, routes, settings, where, transactions, renewer
    )
    server.add_generic_rpc_handlers((service.handler(),))
    await server.start()
    print(f"READY floor grpc=127.0.0.1:{port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(serve())
