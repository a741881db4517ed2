"""Frames on the wire.

A message is: routing ids (ROUTER side only), an empty delimiter, the protocol id frame, one
msgpack header (an Envelope), then raw payload frames. Payloads (records) are never re-encoded.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ferry.protocol.auth import Credentials, Signed
from ferry.protocol.errors import (
    BadFrameError,
    FerryError,
    InvalidParameterError,
    RequestCodeNotSupportedError,
    VersionNotSupportedError,
)
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    reply_types,
    request_types,
    wire_tag,
)
from ferry.protocol.version import PROTOCOL_ID, PROTOCOL_PREFIX

DELIMITER = b""


class RequestEnvelope(msgspec.Struct, frozen=True, omit_defaults=True):
    id: int  # correlation id, echoed by the reply (RocketMQ's opaque)
    body: AnyRequest
    traceparent: str = ""
    tracestate: str = ""
    oneway: bool = False  # no reply is sent
    # a signed request: its sender; the signature is the last frame (ferry.protocol.auth)
    auth: Signed | None = None


class ReplyEnvelope(msgspec.Struct, frozen=True, omit_defaults=True):
    id: int
    body: AnyReply


class FrameError(Exception):
    """A message that cannot be served; carries what is needed to answer it anyway."""

    def __init__(self, error: FerryError, request_id: int = 0) -> None:
        super().__init__(str(error))
        self.error = error
        self.request_id = request_id


def split_routing(frames: list[Any]) -> tuple[list[Any], list[Any]]:
    """(routing ids, rest) split at the first empty frame; no delimiter means no routing part."""
    for i, frame in enumerate(frames):
        if len(frame) == 0:
            return frames[:i], frames[i + 1 :]
    return [], frames


class RequestCodec:
    """Encodes and decodes request/reply envelopes; one per service or client, never shared
    between threads."""

    def __init__(
        self, credentials: Credentials | None = None, *, sign_payload: bool = True
    ) -> None:
        self.credentials = credentials  # every request is signed with them when set
        # False: the header alone (the services' hops inside the cluster; ferry.protocol.auth)
        self.sign_payload = sign_payload
        self._encoder = msgspec.msgpack.Encoder()
        self._req_decoder = msgspec.msgpack.Decoder(RequestEnvelope)
        self._rep_decoder = msgspec.msgpack.Decoder(ReplyEnvelope)
        self._known_request_tags = {wire_tag(t) for t in request_types()}
        self._known_reply_tags = {wire_tag(t) for t in reply_types()}

    # -- encoding --

    def request_frames(self, env: RequestEnvelope, payload: list[Any] | None = None) -> list[Any]:
        creds = self.credentials
        if creds is None:
            frames: list[Any] = [DELIMITER, PROTOCOL_ID, self._encoder.encode(env)]
            if payload:
                frames.extend(payload)
            return frames
        signed = creds.signed(header_only=not self.sign_payload)
        header = self._encoder.encode(msgspec.structs.replace(env, auth=signed))
        body = payload or []
        return [
            DELIMITER,
            PROTOCOL_ID,
            header,
            *body,
            creds.sign(header, body if self.sign_payload else ()),
        ]

    def reply_frames(
        self, routing: list[Any], request_id: int, body: AnyReply, payload: list[Any] | None = None
    ) -> list[Any]:
        frames: list[Any] = [
            *routing,
            DELIMITER,
            PROTOCOL_ID,
            self._encoder.encode(ReplyEnvelope(request_id, body)),
        ]
        if payload:
            frames.extend(payload)
        return frames

    def encode(self, obj: Any) -> bytes:
        return self._encoder.encode(obj)

    # -- decoding --

    def decode_request(self, frames: list[Any]) -> tuple[RequestEnvelope, list[Any]]:
        """frames start after the delimiter: [protocol id, header, *payload]. Whatever the
        bytes, the only exception is FrameError."""
        header = self._check_head(frames)
        try:
            env = self._req_decoder.decode(header)
        except Exception as exc:  # noqa: BLE001 - see DECODE_FAILURES
            raise explain(header, exc, self._known_request_tags) from None
        if env.auth is not None:
            if len(frames) < 3:
                raise FrameError(
                    BadFrameError("a signed request without its signature frame"), env.id
                )
            return env, frames[2:-1]  # the signature is checked by the service's guard
        return env, frames[2:]

    def decode_reply(self, frames: list[Any]) -> tuple[ReplyEnvelope, list[Any]]:
        header = self._check_head(frames)
        try:
            env = self._rep_decoder.decode(header)
        except Exception as exc:  # noqa: BLE001 - see DECODE_FAILURES
            raise explain(header, exc, self._known_reply_tags) from None
        return env, frames[2:]

    @staticmethod
    def _check_head(frames: list[Any]) -> Any:
        if len(frames) < 2:
            raise FrameError(
                BadFrameError(f"expected protocol id and header, got {len(frames)} frame(s)")
            )
        proto = bytes(frames[0])
        if proto != PROTOCOL_ID:
            if proto.startswith(PROTOCOL_PREFIX):
                raise FrameError(
                    VersionNotSupportedError(
                        f"protocol {proto.decode(errors='replace')!r} not supported; "
                        f"this peer speaks {PROTOCOL_ID.decode()}"
                    )
                )
            raise FrameError(BadFrameError("first frame is not a Ferry protocol id"))
        return frames[1]


# Decoding bytes from the network fails with more than msgspec.DecodeError: invalid UTF-8 in a
# string raises UnicodeDecodeError, a struct's __post_init__ or a too-deep nesting raise their
# own. The decode calls above therefore catch Exception: a frame never escapes as anything but
# FrameError (issue 25: a UnicodeDecodeError here once killed the name server).
DECODE_FAILURES = (
    msgspec.MsgspecError,
    ValueError,  # UnicodeDecodeError, bad enum values
    TypeError,
    LookupError,  # IndexError, KeyError
    ArithmeticError,  # OverflowError
    RecursionError,
)


def explain(header: Any, exc: BaseException, known: set[str]) -> FrameError:
    """Slow path: work out why a header did not decode, to answer with the right code."""
    try:
        return _explain(header, exc, known)
    except Exception as inner:  # noqa: BLE001 - explaining must never fail either
        return FrameError(BadFrameError(f"invalid header ({type(inner).__name__})"))


def _explain(header: Any, exc: BaseException, known: set[str]) -> FrameError:
    if isinstance(exc, UnicodeDecodeError):
        why = "a string in the header is not valid UTF-8"
    else:
        why = str(exc)[:200] or type(exc).__name__
    try:
        loose = msgspec.msgpack.decode(header)
    except UnicodeDecodeError:
        loose = _ids_only(header)
        if loose is None:
            return FrameError(BadFrameError(f"invalid header: {why}"))
    except DECODE_FAILURES:
        return FrameError(BadFrameError("header is not valid msgpack"))
    if not isinstance(loose, dict):
        return FrameError(BadFrameError("header is not a map"))
    raw_id = loose.get("id", 0)
    request_id = raw_id if _is_id(raw_id) else 0
    body = loose.get("body")
    tag = body.get("t") if isinstance(body, dict) else None
    if isinstance(tag, str) and tag not in known:
        return FrameError(
            RequestCodeNotSupportedError(f"request type {tag[:80]!r} is not supported"),
            request_id,
        )
    if isinstance(tag, str):
        return FrameError(InvalidParameterError(f"invalid {tag!r} request: {why}"), request_id)
    return FrameError(BadFrameError(f"invalid header: {why}"), request_id)


class _Tag(msgspec.Struct):
    t: str | None = None


class _Head(msgspec.Struct):
    """What of a header is read when some string in it is not UTF-8 (unknown fields are
    skipped undecoded): the id and the type tag, so that the error still reaches the caller's
    request and says which request it was."""

    id: int = 0
    body: _Tag | None = None


class _IdOnly(msgspec.Struct):
    id: int = 0


def _ids_only(header: Any) -> dict[str, Any] | None:
    """{"id", "body": {"t"}} of a header with undecodable strings elsewhere, or None."""
    try:
        head = msgspec.msgpack.decode(header, type=_Head)
    except DECODE_FAILURES:
        pass
    else:
        return {"id": head.id, "body": {"t": head.body.t if head.body is not None else None}}
    try:
        return {"id": msgspec.msgpack.decode(header, type=_IdOnly).id}
    except DECODE_FAILURES:
        return None


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**64
