"""One request a service is serving (Call), and where to send a client something later.

A handler answers its Call once, at once or later (long polling, forwarding); the Call sends
the reply through its service's socket.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import zmq

from ferry.protocol.errors import FerryError
from ferry.protocol.framing import RequestEnvelope
from ferry.protocol.messages import AnyReply, AnyRequest, ErrorReply

if TYPE_CHECKING:
    from ferry.runtime.service import Service

log = logging.getLogger("ferry.service")

Payload = list[Any]
HandlerResult = AnyReply | tuple[AnyReply, Payload] | None
Handler = Callable[[Any, "Call"], HandlerResult]
ReplyCallback = Callable[[AnyReply, Payload], None]


def error_reply(err: FerryError) -> ErrorReply:
    return ErrorReply(code=int(err.code), message=err.message, retriable=err.retriable)


@dataclass(frozen=True)
class ReturnAddress:
    """Where a request came from: enough to send that client something later, unasked."""

    socket: Any
    routing: tuple[Any, ...]


NOTICE_ID = 0  # the correlation id of messages a service sends unasked


class Channel(Protocol):
    """A client's connection, kept to send it something later, unasked (a notice): each wire
    (ZeroMQ here, a protocol door elsewhere) encodes the notice its own way."""

    def notify(self, body: AnyReply) -> None: ...


class ZmqChannel:
    """A ZeroMQ client's channel: a ReplyEnvelope with id NOTICE_ID to its routing id."""

    __slots__ = ("_service", "address")

    def __init__(self, service: Service, address: ReturnAddress) -> None:
        self._service = service
        self.address = address

    def notify(self, body: AnyReply) -> None:
        self._service.notify(self.address, body)


class Call:
    """One request being served; answer it once with reply() or fail()."""

    __slots__ = (
        "_service",
        "_socket",
        "deferred",
        "done",
        "id",
        "oneway",
        "payload",
        "request",
        "routing",
        "signer",
        "traceparent",
        "tracestate",
    )

    def __init__(
        self,
        service: Service,
        socket: zmq.Socket[Any],
        routing: list[Any],
        env: RequestEnvelope,
        payload: Payload,
    ) -> None:
        self._service = service
        self._socket = socket
        self.routing = routing
        self.id = env.id
        self.request: AnyRequest = env.body
        self.payload = payload
        self.traceparent = env.traceparent
        self.tracestate = env.tracestate
        self.oneway = env.oneway
        # the access key that signed it ("" unsigned); the guard has checked the signature
        self.signer = env.auth.access_key if env.auth is not None else ""
        self.done = False
        self.deferred = False

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.deferred:
            self._service.deferred_calls -= 1
        if self.oneway:
            if isinstance(body, ErrorReply):
                log.debug("oneway %s failed: %s", type(self.request).__name__, body.message)
            return
        self._service.send_reply(self._socket, self.routing, self.id, body, payload)

    def fail(self, err: FerryError) -> None:
        self.reply(error_reply(err))

    @property
    def return_address(self) -> ReturnAddress:
        return ReturnAddress(self._socket, tuple(self.routing))

    @property
    def channel(self) -> ZmqChannel:
        return ZmqChannel(self._service, self.return_address)
