"""RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService) as the proxy sees it.

The generated modules come from rocketmq-python-client, which ships no types: this is the only
module that imports them. The rest of the proxy takes their messages as `Pb` values and their
numbers from the enums below (test_protocol checks these against the generated ones).

Importing them runs the client package's __init__ (about 1 s), which creates
~/logs/rocketmq_python/ and calls logging.config.dictConfig: __main__ imports this module
before main() sets up logging, and HOME must be writable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

# A generated protobuf message or message class: untyped, since no stubs exist.
Pb = Any

SERVICE = "apache.rocketmq.v2.MessagingService"

# the generated modules, for convert.py's constructors
definition: Any = definition_pb2
service: Any = service_pb2


class Code(enum.IntEnum):
    """apache.rocketmq.v2.Code: the values the proxy answers with."""

    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    TOO_MANY_REQUESTS = 42900
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    UNSUPPORTED = 50500


class MessageType(enum.IntEnum):
    UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


class Permission(enum.IntEnum):
    NONE = 1
    READ = 2
    WRITE = 3
    READ_WRITE = 4


class ClientType(enum.IntEnum):
    PRODUCER = 1
    PUSH_CONSUMER = 2
    SIMPLE_CONSUMER = 3
    PULL_CONSUMER = 4
    LITE_PUSH_CONSUMER = 5
    LITE_SIMPLE_CONSUMER = 6


class DigestType(enum.IntEnum):
    CRC32 = 1
    MD5 = 2
    SHA1 = 3


class Encoding(enum.IntEnum):
    UNSPECIFIED = 0
    IDENTITY = 1
    GZIP = 2


@dataclass(frozen=True)
class Method:
    """One call of the service: its request and response classes and its streaming shape."""

    name: str
    request: Pb
    response: Pb
    client_streaming: bool
    server_streaming: bool

    def reply(self, code: Code, message: str) -> Pb:
        """A response carrying only a Status (every response of the service has one)."""
        return self.response(status=status(code, message))


def methods() -> dict[str, Method]:
    """Every call of MessagingService, by name, read from the generated descriptor."""
    found: dict[str, Method] = {}
    for m in service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods:
        found[m.name] = Method(
            m.name,
            getattr(service_pb2, m.input_type.name),
            getattr(service_pb2, m.output_type.name),
            bool(m.client_streaming),
            bool(m.server_streaming),
        )
    return found


def status(code: Code, message: str) -> Pb:
    return definition_pb2.Status(code=int(code), message=message)


def generated_enum(name: str) -> dict[str, int]:
    """A generated enum's names and numbers (for the test that pins the ones above)."""
    return dict(getattr(definition_pb2, name).items())
