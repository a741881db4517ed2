"""The gRPC receipt handle: what a client acks or changes with, carrying all the proxy needs,
since it keeps nothing: the broker the message was popped from and Ferry's own receipt handle.

Written as "F1" + base64url("<broker>\\n<Ferry handle>"), without padding. Whatever a client
sends back is read here only: a handle that is not one of these raises ProxyError
INVALID_RECEIPT_HANDLE; a well-formed one that the broker does not hold (forged, stale, of
another group) is refused by the broker, with the same code. No I/O."""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code

PREFIX = "F1"
MAX_HANDLE = 4096
_SEP = "\n"


class Receipt(NamedTuple):
    broker_name: str
    handle: str  # Ferry's receipt handle, as the broker gave it


def encode(receipt: Receipt) -> str:
    raw = f"{receipt.broker_name}{_SEP}{receipt.handle}".encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> Receipt:
    """The receipt a client's handle names; ProxyError INVALID_RECEIPT_HANDLE if none."""
    if not text or len(text) > MAX_HANDLE or not text.startswith(PREFIX):
        raise _invalid("the receipt handle is not one this proxy gave")
    body = text[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        broker, sep, handle = raw.decode("utf-8").partition(_SEP)
    except (binascii.Error, ValueError):
        raise _invalid("the receipt handle is garbled") from None
    if not sep or not broker or not handle or not broker.isprintable():
        raise _invalid("the receipt handle is garbled")
    return Receipt(broker, handle)


def _invalid(message: str) -> ProxyError:
    return ProxyError(Code.INVALID_RECEIPT_HANDLE, message)
