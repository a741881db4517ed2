"""ferry.client.aio: the SDK for asyncio, mirroring ferry.client.

Clients are started and shut down with `await client.start()` / `await client.shutdown()` or
`async with`; their calls are coroutines and raise ferry.client's errors. They share the sync
SDK's routing, batching, encoding and decoding, and talk to brokers on zmq.asyncio.
"""

from __future__ import annotations

from ferry.client.aio.admin import Admin
from ferry.client.aio.producer import Producer
from ferry.client.aio.push_consumer import AsyncListener, PushConsumer
from ferry.client.aio.simple_consumer import SimpleConsumer
from ferry.client.aio.transaction import AsyncTransactionListener, TransactionProducer

__all__ = [
    "Admin",
    "AsyncListener",
    "AsyncTransactionListener",
    "Producer",
    "PushConsumer",
    "SimpleConsumer",
    "TransactionProducer",
]
