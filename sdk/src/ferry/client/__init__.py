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
from ferry.client.message_selector import MessageSelector
from ferry.client.producer import Producer
from ferry.client.pull_consumer import PullConsumer
from ferry.client.push_consumer import PushConsumer
from ferry.client.queries import PullResult
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
