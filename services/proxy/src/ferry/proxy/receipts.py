"""The gRPC receipt handle: what a client acks or changes with, carrying all the proxy needs,
since it keeps nothing: the broker the message was popped from, Ferry's own receipt handle and
the message's CommitLog offset (what ForwardMessageToDeadLetterQueue copies to the DLQ).

Written as "F1" + base64url("<broker>\\n<Ferry handle>\\n<offset>"), without padding (the
offset may be missing: -1). Whatever a client sends back is read here only: a handle that is
not one of these raises ProxyError INVALID_RECEIPT_HANDLE; a well-formed one that the broker
does not hold (forged, stale, of another group) is refused by the broker, with the same code.
No I/O."""

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
    phys_offset: int = -1  # the message's CommitLog offset; -1: not known


def encode(receipt: Receipt) -> str:
    text = f"{receipt.broker_name}{_SEP}{receipt.handle}"
    if receipt.phys_offset >= 0:
        text += f"{_SEP}{receipt.phys_offset}"
    raw = text.encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> Receipt:
    """The receipt a client's handle names; ProxyError INVALID_RECEIPT_HANDLE if none."""
    if not text or len(text) > MAX_HANDLE or not text.startswith(PREFIX):
        raise _invalid("the receipt handle is not one this proxy gave")
    body = text[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        broker, sep, rest = raw.decode("utf-8").partition(_SEP)
    except (binascii.Error, ValueError):
        raise _invalid("the receipt handle is garbled") from None
    handle, _, offset = rest.partition(_SEP)
    if not sep or not broker or not handle or not broker.isprintable():
        raise _invalid("the receipt handle is garbled")
    if offset and not offset.isdigit():
        raise _invalid("the receipt handle is garbled")
    return Receipt(broker, handle, int(offset) if offset else -1)


def _invalid(message: str) -> ProxyError:
    return ProxyError(Code.INVALID_RECEIPT_HANDLE, message)
