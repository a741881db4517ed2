"""ferry.client.aio: the SDK for asyncio, mirroring ferry.client.

Clients are started and shut down with `await client.start()` / `await client.shutdown()` or
`async with`; their calls are coroutines and raise ferry.client's errors. They share the sync
SDK's routing, batching, encoding and decoding, and talk to brokers on zmq.asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ferry.client.aio.producer import Producer
from ferry.client.aio.push_consumer import AsyncListener, PushConsumer
from ferry.client.aio.simple_consumer import SimpleConsumer
from ferry.client.aio.transaction import AsyncTransactionListener, TransactionProducer

if TYPE_CHECKING:
    from ferry.admin.aio import Admin


def __getattr__(name: str) -> Any:
    # Admin lives in ferry.admin.aio (ferry.admin imports the client, never the reverse):
    # looked up on first use, as ferry.client.Admin is
    if name == "Admin":
        return importlib.import_module("ferry.admin.aio").Admin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Admin",
    "AsyncListener",
    "AsyncTransactionListener",
    "Producer",
    "PushConsumer",
    "SimpleConsumer",
    "TransactionProducer",
]
