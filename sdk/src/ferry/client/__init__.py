"""Ferry's Python SDK: producers and consumers, RocketMQ-style; admin tools in ferry.admin.

from ferry.client import Message, Producer

with Producer("my-group", "127.0.0.1:9876") as producer:
    result = producer.send(Message("orders", b"hello", tags="created"))

Consumers: PushConsumer (a listener called with pulled messages) and PullConsumer (poll()).
Traces: every client makes OpenTelemetry spans from the global TracerProvider (or the
`tracer_provider=` it is given); enable_tracing(endpoint) installs one exporting over OTLP.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ferry.client.message import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    SendResult,
    SendStatus,
)
from ferry.client.message_selector import MessageSelector
from ferry.client.producer import Producer
from ferry.client.pull_consumer import PullConsumer
from ferry.client.push_consumer import PushConsumer
from ferry.client.request_reply import RequestCallback
from ferry.client.selector import MessageQueueSelector, select_by_hash, select_random
from ferry.client.simple_consumer import SimpleConsumer
from ferry.client.tracing_setup import enable_tracing
from ferry.client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from ferry.protocol.auth import Credentials
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BadSignatureError,
    BrokerNotExistError,
    BrokerSystemError,
    ConnectionFailedError,
    FerryError,
    InvalidParameterError,
    InvalidReceiptHandleError,
    MessageIllegalError,
    NoCredentialsError,
    NoPermissionError,
    QueryNotFoundError,
    ReplyTimeoutError,
    RequestTimeoutError,
    ServiceNotAvailableError,
    SubscriptionGroupNotExistError,
    SubscriptionParseError,
    SystemBusyError,
    TopicExistAlreadyError,
    TopicNotExistError,
)
from ferry.protocol.sql_filter import SqlFilterError

if TYPE_CHECKING:
    from ferry.admin import Admin, ControllerAdmin, PullResult

# Admin(namesrv) is part of the SDK's public contract, but the admin tools live in
# ferry.admin, which imports this package. These names are looked up on first use (PEP 562),
# so importing ferry.client never imports ferry.admin and the two never form a circle.
_FROM_ADMIN = {"Admin", "ControllerAdmin", "PullResult"}


def __getattr__(name: str) -> Any:
    if name in _FROM_ADMIN:
        return getattr(importlib.import_module("ferry.admin"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Admin",
    "BadSignatureError",
    "BrokerNotExistError",
    "BrokerSystemError",
    "ConnectionFailedError",
    "ConsumeFromWhere",
    "ConsumeResult",
    "ControllerAdmin",
    "Credentials",
    "FerryError",
    "InvalidParameterError",
    "InvalidReceiptHandleError",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageIllegalError",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "MessageSelector",
    "NoCredentialsError",
    "NoPermissionError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueryNotFoundError",
    "ReplyTimeoutError",
    "RequestCallback",
    "RequestTimeoutError",
    "SendResult",
    "SendStatus",
    "ServiceNotAvailableError",
    "SimpleConsumer",
    "SqlFilterError",
    "SubscriptionGroupNotExistError",
    "SubscriptionParseError",
    "SystemBusyError",
    "TopicExistAlreadyError",
    "TopicNotExistError",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "enable_tracing",
    "select_by_hash",
    "select_random",
]
