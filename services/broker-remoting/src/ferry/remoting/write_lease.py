"""Fencing in controller mode: remoting acknowledges writes only while it holds a write lease.

The broker's agent (in `ferry serve broker`) grants it after each heartbeat the controller
answered with "you are master", until a time counted from when the heartbeat was SENT and
shorter than the controller's heartbeat timeout: so the lease always ends before the
controller may elect another master. A broker paused (SIGSTOP) past its lease, or cut off from
the controller, acknowledges nothing when it resumes, even a put it stored: the put may be
cut from its log when it rejoins as a slave, and the client sends it again to the new master.
Without controller mode there is no lease: every write is acknowledged as before.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import FerryError, ServiceNotAvailableError
from ferry.protocol.messages import (
    AnyReply,
    GrantWriteLeaseRequest,
    OkReply,
    SendMessageReply,
)
from ferry.remoting.calls import AfterStore, Caller, Handler, checked_first
from ferry.runtime.lease import Lease
from ferry.runtime.service import Payload


def fenced(lease: WriteLease, handler: Handler) -> Handler:
    """handler, refused at once while a lease is enforced and lapsed (nothing is written)."""
    return checked_first(lease.check, handler) if lease.enforced else handler


class WriteLease(Lease):
    def __init__(
        self, broker_name: str, enforced: bool, on_granted: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__(enforced)
        self._broker_name = broker_name
        # told when a grant ends a lapse: a master registers with the name servers only under
        # a lease (a resumed, replaced master must not name itself id 0 anywhere)
        self._on_granted = on_granted
        self.refused = 0  # writes not acknowledged for want of a lease

    def grant_request(self, req: GrantWriteLeaseRequest, _call: Caller) -> OkReply:
        was_lapsed = self.lapsed()
        self.grant(req.until_monotonic, req.epoch)
        if was_lapsed and not self.lapsed():
            self._on_granted()
        return OkReply()

    def error(self) -> FerryError:
        self.refused += 1
        return ServiceNotAvailableError(
            f"broker {self._broker_name} holds no write lease (controller mode: it is not "
            "master, or has not heard from the controller in time); send again: the route "
            "moves to the group's master",
            retriable=True,
        )

    def check(self) -> None:
        """Before a write is taken."""
        if self.lapsed():
            raise self.error()

    def gate(self, after_store: AfterStore) -> AfterStore:
        """after_store, with a stored send acknowledged only while the lease holds (checked
        again at the moment of the answer: a SYNC_MASTER's wait for its slaves may outlast
        the lease)."""
        if not self.enforced:
            return after_store

        def gated(call: Caller, reply: SendMessageReply, end_offset: int) -> None:
            if reply.status == SendStatus.SEND_OK and self.lapsed():
                call.fail(self.error())
                return
            after_store(_LeaseCheckedCall(call, self), reply, end_offset)

        return gated


class _LeaseCheckedCall:
    """A Caller whose SEND_OK answer turns into a refusal once the lease lapsed."""

    def __init__(self, call: Caller, lease: WriteLease) -> None:
        self._call = call
        self._lease = lease

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None:
        if (
            isinstance(body, SendMessageReply)
            and body.status == SendStatus.SEND_OK
            and self._lease.lapsed()
        ):
            self._call.fail(self._lease.error())
            return
        self._call.reply(body, payload)

    def fail(self, err: FerryError) -> None:
        self._call.fail(err)

    payload = property(lambda self: self._call.payload)
    signer = property(lambda self: self._call.signer)
    traceparent = property(lambda self: self._call.traceparent)
    tracestate = property(lambda self: self._call.tracestate)
    done = property(lambda self: self._call.done)
    channel = property(lambda self: self._call.channel)
