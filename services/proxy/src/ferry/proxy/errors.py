"""How the proxy's failures reach a client: a ProxyError names its gRPC Code; a FerryError from
the SDK or a broker is translated once, here."""

from __future__ import annotations

from ferry.protocol.errors import (
    BadSignatureError,
    FerryError,
    InvalidParameterError,
    InvalidReceiptHandleError,
    MessageIllegalError,
    NoCredentialsError,
    NoPermissionError,
    RequestTimeoutError,
    SubscriptionGroupNotExistError,
    SubscriptionParseError,
    SystemBusyError,
    TopicNotExistError,
)
from ferry.proxy.protocol import Code


class ProxyError(Exception):
    """A request refused by the proxy itself, with the Code the client is answered with."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# most specific first: a subclass must come before its base
_CODES: tuple[tuple[type[FerryError], Code], ...] = (
    (TopicNotExistError, Code.TOPIC_NOT_FOUND),
    (InvalidReceiptHandleError, Code.INVALID_RECEIPT_HANDLE),
    (SubscriptionGroupNotExistError, Code.CONSUMER_GROUP_NOT_FOUND),
    (SubscriptionParseError, Code.ILLEGAL_FILTER_EXPRESSION),
    (MessageIllegalError, Code.BAD_REQUEST),
    (InvalidParameterError, Code.BAD_REQUEST),
    (NoPermissionError, Code.FORBIDDEN),
    (NoCredentialsError, Code.UNAUTHORIZED),
    (BadSignatureError, Code.UNAUTHORIZED),
    (SystemBusyError, Code.TOO_MANY_REQUESTS),
    (RequestTimeoutError, Code.PROXY_TIMEOUT),
)


def status_of(err: FerryError) -> tuple[Code, str]:
    """The Code and message a client gets for a Ferry error (INTERNAL_SERVER_ERROR for any
    other: a broker down, no route to it)."""
    for kind, code in _CODES:
        if isinstance(err, kind):
            return code, str(err) or type(err).__name__
    return Code.INTERNAL_SERVER_ERROR, f"{type(err).__name__}: {err}"
