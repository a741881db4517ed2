"""Ferry's Python SDK: producers, consumers and admin, RocketMQ-style.

from ferry.client import Message, Producer

with Producer("my-group", "127.0.0.1:9876") as producer:
    result = producer.send(Message("orders", b"hello", tags="created"))

Consumers: PushConsumer (a listener called with pulled messages) and PullConsumer (poll()).
Traces: every client makes OpenTelemetry spans from the global TracerProvider (or the
`tracer_provider=` it is given); enable_tracing(endpoint) installs one exporting over OTLP.
"""

from ferry.client.admin import Admin
from ferry.client.controller_admin import ControllerAdmin
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
from ferry.client.producer import Producer
from ferry.client.pull_consumer import PullConsumer
from ferry.client.push_consumer import PushConsumer
from ferry.client.queries import PullResult
from ferry.client.selector import MessageQueueSelector, select_by_hash, select_random
from ferry.client.tracing_setup import enable_tracing
from ferry.client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BrokerNotExistError,
    BrokerSystemError,
    ConnectionFailedError,
    FerryError,
    InvalidParameterError,
    MessageIllegalError,
    NoPermissionError,
    QueryNotFoundError,
    RequestTimeoutError,
    ServiceNotAvailableError,
    SubscriptionGroupNotExistError,
    SystemBusyError,
    TopicExistAlreadyError,
    TopicNotExistError,
)

__all__ = [
    "Admin",
    "BrokerNotExistError",
    "BrokerSystemError",
    "ConnectionFailedError",
    "ConsumeFromWhere",
    "ConsumeResult",
    "ControllerAdmin",
    "FerryError",
    "InvalidParameterError",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageIllegalError",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "NoPermissionError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueryNotFoundError",
    "RequestTimeoutError",
    "SendResult",
    "SendStatus",
    "ServiceNotAvailableError",
    "SubscriptionGroupNotExistError",
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
