"""What a processor sees of the request it serves, and the shapes processors are built from.

A processor is called with a typed request and a Caller: the records frame that came with it,
who signed it, its trace context, and how to answer (reply once, or fail with a typed error;
a handler may also return its reply or raise). It never sees the socket, the routing ids or
the envelope: those stay in the service loop (ferry.runtime.service.Call is one Caller), and a
protocol door in front of the same processors brings a Caller of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ferry.protocol.errors import FerryError
from ferry.protocol.messages import AnyReply, SendMessageReply
from ferry.runtime.call import Channel
from ferry.runtime.service import Payload


class Caller(Protocol):
    @property
    def payload(self) -> Payload: ...

    @property
    def signer(self) -> str:
        """The access key that signed the request ("" unsigned); the guard checked it."""
        ...

    @property
    def traceparent(self) -> str: ...

    @property
    def tracestate(self) -> str: ...

    @property
    def done(self) -> bool: ...

    @property
    def channel(self) -> Channel:
        """Where notices to this client go (member_notices.py), on whichever wire it came."""
        ...

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None: ...

    def fail(self, err: FerryError) -> None: ...


Handler = Callable[[Any, Any], Any]  # (typed request, Caller) -> reply, (reply, frames) or None
# How a stored send is answered: (caller, reply, the put's end offset in the CommitLog)
AfterStore = Callable[[Caller, SendMessageReply, int], None]


def reply_now(call: Caller, reply: SendMessageReply, _end_offset: int) -> None:
    call.reply(reply)


def checked_first(check: Callable[[], None], handler: Handler) -> Handler:
    """handler, after check(), which raises to refuse the request before anything is done."""

    def checked(req: Any, call: Any) -> Any:
        check()
        return handler(req, call)

    return checked
