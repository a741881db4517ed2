"""RocketMQ's remoting protocol in front of a Service's own handlers: the second wire.

A RemotingDoor is a TcpDoor whose frames are RemotingCommands (ferry.protocol.rocketmq). Each
request code the service serves has a Route: `request` turns the command into the Ferry
request that code means (its ext fields and body), and `response` turns the Ferry reply back
into the RemotingCommand a RocketMQ client expects. Between the two the request takes the same
path as one from ZeroMQ, Service.serve(), so there is one handler per request whatever the
wire. An ErrorReply becomes a response with its code (Ferry's codes are RocketMQ's) and its
message as the remark.

Responses echo the request's opaque and set the response flag. A request with the oneway flag
gets no response. The door also sends oneway requests of its own down a client's connection
(notices: NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) through a DoorChannel.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ferry.protocol.errors import FerryError, InvalidParameterError
from ferry.protocol.messages import AnyReply, ErrorReply, OkReply
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RESPONSE_FLAG
from ferry.protocol.rocketmq.command import CommandError, RemotingCommand, decode, encode_parts
from ferry.runtime.call import Payload, error_reply
from ferry.runtime.remoting_auth import authenticate
from ferry.runtime.security import settings as security_settings
from ferry.runtime.security.guard import Guard
from ferry.runtime.service import Service
from ferry.runtime.tcp_door import Connection, TcpDoor
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.remoting_door")

REQUEST_CODE_NOT_SUPPORTED = 3
SYSTEM_ERROR = 1
NO_PERMISSION = 16
MIN_FRAME_BYTES = 4  # the header length word

# (the request, its call) -> the Ferry request; raises FerryError or CommandError to refuse
ToRequest = Callable[[RemotingCommand, "DoorCall"], Any]
# (the request, the Ferry reply, its payload) -> the response
ToResponse = Callable[[RemotingCommand, Any, Payload], RemotingCommand]
# a notice (a typed message the service sends unasked), the connection it goes to -> the
# request that carries it
ToNotice = Callable[[AnyReply, Connection], RemotingCommand | None]
# the client's response to a request the door asked it, or None: no answer in time, or closed
OnAnswer = Callable[[RemotingCommand | None], None]


def _ip(peer: str) -> str:
    host = peer.rpartition(":")[0]
    return host.strip("[]")


@dataclass(frozen=True)
class Route:
    request: ToRequest
    response: ToResponse


class DoorCall:
    """One RemotingCommand being served: the Caller a handler answers (ferry.remoting.calls)."""

    __slots__ = (
        "_door",
        "cmd",
        "conn",
        "deferred",
        "done",
        "payload",
        "response",
        "signer",
        "traceparent",
        "tracestate",
        "user",
    )

    def __init__(self, door: RemotingDoor, conn: Connection, cmd: RemotingCommand) -> None:
        self._door = door
        self.conn = conn
        self.cmd = cmd
        self.response: ToResponse | None = None
        self.payload: Payload = []
        self.signer = ""  # the access key that signed it, once authentication checked it
        self.user: Any = None  # its user (authentication on; None: the cluster's services)
        self.traceparent = ""
        self.tracestate = ""
        self.done = False
        self.deferred = False

    @property
    def channel(self) -> DoorChannel:
        return DoorChannel(self._door, self.conn)

    @property
    def door(self) -> RemotingDoor:
        return self._door

    def relay(self, out: RemotingCommand) -> None:
        """Answers with `out` as it is (a response made elsewhere, e.g. a client's)."""
        self.response = lambda _cmd, _reply, _payload: out
        self.reply(OkReply())

    def permitted(self, request: Any) -> FerryError | None:
        """Whether this call's user may send `request` (None: yes): for a route that answers
        by asking the handlers several requests of its own, each checked as the door checks
        the one a route returns."""
        guard = self._door.service.guard
        if guard is None or self.user is None:
            return None
        return guard.permit(self.signer, self.user, request, _ip(self.conn.peer))

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.deferred:
            self._door.service.deferred_calls -= 1
        cmd = self.cmd
        if cmd.is_oneway or self.conn.closed:
            return
        if isinstance(body, ErrorReply) or self.response is None:
            code = body.code if isinstance(body, ErrorReply) else SYSTEM_ERROR
            out = cmd.response(code, getattr(body, "message", ""))
        else:
            try:
                out = self.response(cmd, body, payload or [])
            except (FerryError, CommandError, ValueError) as exc:
                self._door.complaints.warning("%s: response to %d: %s", self._door, cmd.code, exc)
                out = cmd.response(SYSTEM_ERROR, str(exc))
        self._door.send(self.conn, out)

    def fail(self, err: FerryError) -> None:
        self.reply(error_reply(err))


class DoorChannel:
    """A RocketMQ client's connection as a notice channel (ferry.runtime.call.Channel)."""

    __slots__ = ("_door", "conn")

    def __init__(self, door: RemotingDoor, conn: Connection) -> None:
        self._door = door
        self.conn = conn

    def notify(self, body: AnyReply) -> None:
        self._door.notify(self.conn, body)


class RemotingDoor:
    """Serves `routes` (request code -> Route) on host:port for `service`'s handlers."""

    def __init__(
        self,
        service: Service,
        host: str,
        port: int,
        routes: dict[int, Route],
        *,
        name: str = "rocketmq",
        to_notice: ToNotice | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.service = service
        self.routes = routes
        self.name = name
        self._to_notice = to_notice
        self.on_close = on_close
        self._opaques = itertools.count(1)
        self.complaints = ThrottledLog(log)
        self.requests = 0
        self.unsupported = 0
        self.bad_frames = 0
        self.notices = 0
        self.refused = 0  # for want of credentials or permission
        self.asks = 0
        self.unanswered = 0  # asks that timed out or whose connection closed
        # requests the door asked clients, by connection id, then opaque
        self._asked: dict[int, dict[int, OnAnswer]] = {}
        self.tcp = TcpDoor(
            service,
            host,
            port,
            self._on_frame,
            on_close=self._closed,
            name=name,
            min_frame_bytes=MIN_FRAME_BYTES,
        )
        self.address = self.tcp.address
        if security_settings.tls_enabled():
            log.warning(
                "%s door on %s is plain TCP: tlsEnable encrypts Ferry's own ports only, so "
                "RocketMQ clients' requests travel signed but in clear",
                name,
                self.address,
            )

    def __repr__(self) -> str:
        return f"RemotingDoor({self.name}, {self.address})"

    # ---- requests in ----

    def _on_frame(self, conn: Connection, frame: bytes) -> None:
        try:
            cmd = decode(frame)
        except CommandError as exc:
            # the stream cannot be trusted past a frame that does not decode
            self.bad_frames += 1
            self.complaints.warning("%s: bad frame from %s: %s", self, conn.peer, exc)
            conn.close()
            return
        if cmd.is_response:  # to an ask(); a response to nothing asked is dropped
            self._answered(conn.id, cmd.opaque, cmd)
            return
        self.requests += 1
        call = DoorCall(self, conn, cmd)
        guard = self.service.guard
        user: Any = None
        if guard is not None:  # authentication on: the signature first, whatever the code
            who = authenticate(guard, cmd)
            if isinstance(who, FerryError):
                self._refuse_auth(guard, call, who, str(cmd.code))
                return
            call.signer, user = who
            call.user = user
        route = self.routes.get(cmd.code)
        if route is None:
            self.unsupported += 1
            self._refuse(call, REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")
            return
        call.response = route.response
        try:
            request = route.request(cmd, call)
        except FerryError as err:
            call.fail(err)
            return
        except (CommandError, ValueError, KeyError) as exc:
            call.fail(InvalidParameterError(f"request code {cmd.code}: {exc}"))
            return
        if request is None:  # answered by the route itself
            return
        if guard is not None and user is not None:  # None: the cluster's own services
            refused = guard.permit(call.signer, user, request, _ip(conn.peer))
            if refused is not None:
                self._refuse_auth(guard, call, refused, type(request).__name__)
                return
        self.service.serve(request, call)

    def _refuse_auth(self, guard: Guard, call: DoorCall, err: FerryError, request: str) -> None:
        # RocketMQ's clients know one code for every refusal of credentials or permissions
        self.refused += 1
        guard.count_refusal(err, request, call.cmd.ext_fields.get("AccessKey", "-"), call.conn.peer)
        self._refuse(call, NO_PERMISSION, err.message)

    def _refuse(self, call: DoorCall, code: int, remark: str) -> None:
        call.done = True
        if not call.cmd.is_oneway:
            self.send(call.conn, call.cmd.response(code, remark))

    # ---- out ----

    def send(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            parts = encode_parts(cmd)
        except CommandError as exc:
            self.complaints.warning("%s: cannot encode %d: %s", self, cmd.code, exc)
            error = RemotingCommand(code=SYSTEM_ERROR, opaque=cmd.opaque, flag=cmd.flag)
            parts = encode_parts(error)
        conn.send(parts)

    def notify(self, conn: Connection, body: AnyReply) -> None:
        if self._to_notice is None or conn.closed:
            return
        cmd = self._to_notice(body, conn)
        if cmd is None:
            return
        cmd.opaque = next(self._opaques)
        self.notices += 1
        self.send(conn, cmd)

    def ask(
        self, conn: Connection, cmd: RemotingCommand, on_answer: OnAnswer, timeout_s: float
    ) -> None:
        """Sends `cmd` to the client on `conn` as a request of the door's own (a new opaque)
        and calls on_answer with its response, or with None when none came within
        timeout_s or the connection closed first. Exactly once either way."""
        if conn.closed:
            on_answer(None)
            return
        opaque = next(self._opaques) & 0x7FFFFFFF  # an int32 on the wire
        cmd.opaque = opaque
        cmd.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        self._asked.setdefault(conn.id, {})[opaque] = on_answer
        self.asks += 1
        self.service.later(timeout_s, lambda: self._answered(conn.id, opaque, None))
        self.send(conn, cmd)

    def _answered(self, conn_id: int, opaque: int, answer: RemotingCommand | None) -> None:
        waiting = self._asked.get(conn_id)
        on_answer = waiting.pop(opaque, None) if waiting else None
        if on_answer is None:
            return
        if not waiting:
            del self._asked[conn_id]
        if answer is None:
            self.unanswered += 1
        try:
            on_answer(answer)
        except Exception:  # a route's bug must not take the door's loop down
            log.exception("%s: handling the answer to %d failed", self, opaque)

    def _closed(self, conn: Connection) -> None:
        for opaque in list(self._asked.get(conn.id, {})):
            self._answered(conn.id, opaque, None)
        if self.on_close is not None:
            self.on_close(conn)

    def close(self) -> None:
        self.tcp.close()
