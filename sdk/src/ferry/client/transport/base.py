"""What the blocking transport (this package) and the asyncio one (ferry.client.aio.transport)
share: the types of a request's result, a client DEALER's options and monitor events, what a
reply or a peer's state means to a request, and the pool of connections by address."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import zmq

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient, client_for
from ferry.protocol.errors import ConnectionFailedError, FerryError, error_for
from ferry.protocol.framing import FrameError, ReplyEnvelope, RequestCodec
from ferry.protocol.messages import AnyReply, ErrorReply

log = logging.getLogger("ferry.client.transport")

Payload = list[Any]
Result = tuple[AnyReply, Payload]
ConnT = TypeVar("ConnT")
NoticeCallback = Callable[[str, AnyReply], None]  # (peer address, notice)

DEFAULT_TIMEOUT_S = 3.0
SEND_HWM = 10_000  # requests ZeroMQ queues per peer; beyond it they wait in our deque
# Frames from this size on are handed to ZeroMQ without a copy. Each such frame, once sent,
# wakes pyzmq's garbage-collector thread, which takes the GIL: copying a batch (up to
# send_async's 512 KiB) costs less than that, as in the services (ferry.runtime.service).
ZERO_COPY_MIN = 512 * 1024 + 1


def endpoint_of(address: str) -> str:
    """ "host:port" -> "tcp://host:port"; full ZeroMQ endpoints pass through."""
    return address if "://" in address else f"tcp://{address}"


# a peer that speaks CURVE to a plain client, or with another key (ZMQ_EVENT_HANDSHAKE_*)
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


# what a client's monitor watches on its DEALER
MONITOR_EVENTS = (
    zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED | HANDSHAKE_FAILED
)


def setup_dealer(sock: zmq.Socket[Any], curve: CurveClient | None) -> None:
    """A client's DEALER to a broker or name server (the sync and the asyncio transport's)."""
    sock.linger = 0
    sock.sndhwm = SEND_HWM
    # Replies are never dropped on our side: a full receive queue would push back through
    # TCP to the peer's ROUTER, which drops what passes its own high-water mark, and the
    # request would then wait out its timeout (seen with 5,000 requests in flight).
    sock.rcvhwm = 0
    sock.immediate = True  # queue only on completed connections
    if curve is not None:
        curve.apply(sock)


def down_error(address: str, mismatch: bool, refused: bool, curve: bool) -> ConnectionFailedError:
    """Why a request cannot go now, said once and plainly (callers add who the peer is)."""
    if mismatch:
        return ConnectionFailedError(
            f"{address} did not complete the security handshake: the cluster has "
            "tlsEnable (give tls_server_key, its server.key) or the key is not its key"
            if not curve
            else f"{address} did not complete the CURVE handshake: is tls_server_key "
            "this cluster's server.key, and does it have tlsEnable?"
        )
    if refused:
        return ConnectionFailedError(f"connection refused: nothing answers at {address}")
    return ConnectionFailedError(f"connection to {address} was lost")


def decode_reply(
    codec: RequestCodec, frames: list[Any], address: str
) -> tuple[ReplyEnvelope, Payload] | None:
    """A reply's envelope and payload frames; None (logged) when it does not decode."""
    if frames and not frames[0]:
        frames = frames[1:]
    try:
        return codec.decode_reply(frames)
    except FrameError as exc:
        log.warning("undecodable reply from %s: %s", address, exc.error)
        return None


def reply_error(body: AnyReply) -> FerryError | None:
    """The typed error an ErrorReply stands for; None for any other reply."""
    if isinstance(body, ErrorReply):
        return error_for(body.code, body.message, body.retriable)
    return None


def hand_notice(on_notice: NoticeCallback | None, address: str, body: AnyReply) -> None:
    """A notice (a reply with id 0) to the client's callback; its failure is only logged."""
    if on_notice is None:
        return
    try:
        on_notice(address, body)
    except Exception:
        log.exception("notice handler failed for %s from %s", type(body).__name__, address)


class PoolBase(Generic[ConnT]):
    """Connections by address, one pool per client: what the sync and the asyncio pools
    keep alike (the options each connection gets)."""

    def __init__(
        self,
        on_notice: NoticeCallback | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        # tlsEnable: CURVE to servers with this public key (a key file or the key itself)
        self._curve = client_for(tls_server_key) if tls_server_key else None
        self._on_notice = on_notice
        self.credentials = credentials
        self._conns: dict[str, ConnT] = {}
        self.closed = False
        self._setup()

    def _setup(self) -> None:
        """What a kind of pool adds: its ZeroMQ context (the constructor's last step)."""
        raise NotImplementedError
