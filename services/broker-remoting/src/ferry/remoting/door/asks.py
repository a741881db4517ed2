"""For a door route whose answer takes several of the processors' requests (GET_CONSUME_STATS):
runs them on the processors' own handlers, as Service.serve would, and hands back the replies
once all are in. Each sub-request gets a Caller of its own that carries the door call's
signer, trace context and channel; with authentication on, each must be one the caller's user
may send (DoorCall.permitted), or the door call is refused."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ferry.protocol.errors import FerryError
from ferry.protocol.messages import AnyReply, ErrorReply
from ferry.remoting.calls import Handler
from ferry.runtime.call import Channel, Payload, error_reply
from ferry.runtime.remoting_door import DoorCall

log = logging.getLogger("ferry.remoting.door")

Replies = Callable[[list[AnyReply]], None]
Answered = Callable[[AnyReply, Payload], None]


class _SubCall:
    """The Caller one sub-request answers."""

    __slots__ = ("_answered", "_parent", "deferred", "done", "payload")

    def __init__(self, parent: DoorCall, answered: Answered) -> None:
        self._parent = parent
        self._answered = answered
        self.payload: Payload = []
        self.done = False
        self.deferred = False

    @property
    def signer(self) -> str:
        return self._parent.signer

    @property
    def traceparent(self) -> str:
        return self._parent.traceparent

    @property
    def tracestate(self) -> str:
        return self._parent.tracestate

    @property
    def channel(self) -> Channel:
        return self._parent.channel

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None:
        if not self.done:
            self.done = True
            self._answered(body, payload or [])

    def fail(self, err: FerryError) -> None:
        self.reply(error_reply(err))


class Asks:
    """The processors' handlers, to be asked from inside a route."""

    def __init__(self, handlers: dict[type, Handler]) -> None:
        self._handlers = handlers

    def all(self, parent: DoorCall, requests: Sequence[Any], then: Replies) -> None:
        """Runs every request; then(replies) once all are answered, in the requests' order
        (an ErrorReply where one failed)."""
        for req in requests:  # with authentication on, each as if the client had sent it
            refused = parent.permitted(req)
            if refused is not None:
                parent.fail(refused)
                return
        replies: list[AnyReply | None] = [None] * len(requests)
        left = [len(requests)]
        if not requests:
            then([])
            return

        def answered(i: int) -> Answered:
            def done(body: AnyReply, _payload: Payload) -> None:
                replies[i] = body
                left[0] -= 1
                if left[0] == 0:
                    then([r for r in replies if r is not None])

            return done

        for i, req in enumerate(requests):
            self._run(req, _SubCall(parent, answered(i)))

    def one(self, parent: DoorCall, request: Any, then: Answered) -> None:
        """Runs one request; then(reply, payload) once answered (the payload: raw records a
        read returns beside its reply)."""
        refused = parent.permitted(request)
        if refused is not None:
            parent.fail(refused)
            return
        self._run(request, _SubCall(parent, then))

    def _run(self, req: Any, call: _SubCall) -> None:
        handler = self._handlers.get(type(req))
        if handler is None:
            call.reply(ErrorReply(code=3, message=f"no handler for {type(req).__name__}"))
            return
        try:
            result = handler(req, call)
        except FerryError as err:
            call.fail(err)
            return
        except Exception as exc:  # as Service.serve: one bad request never takes the door down
            log.exception("door: %s failed", type(req).__name__)
            call.fail(FerryError(f"internal error: {type(exc).__name__}: {exc}"))
            return
        if result is None:
            return  # answered later through the call
        call.reply(result[0] if isinstance(result, tuple) else result)
