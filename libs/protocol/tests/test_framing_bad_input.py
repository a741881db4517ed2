"""Whatever bytes arrive, decoding a request or a reply raises FrameError and nothing else
(issue 25: invalid UTF-8 in a header string raised UnicodeDecodeError and killed a service)."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferry.protocol.codes import ResponseCode
from ferry.protocol.framing import FrameError, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ErrorReply,
    PingRequest,
    PullMessageRequest,
    SendMessageRequest,
)
from ferry.protocol.version import PROTOCOL_ID

BAD_UTF8 = b"\xff\xfe\xfd"


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec()


def _with_bad_string(codec: RequestCodec, env: RequestEnvelope, good: str) -> bytes:
    raw = codec.encode(env)
    assert raw.count(good.encode()) == 1
    return raw.replace(good.encode(), BAD_UTF8[: len(good)])


def test_invalid_utf8_in_envelope_string_is_invalid_parameter(codec: RequestCodec) -> None:
    # the frame of the report: a valid envelope whose traceparent is not UTF-8
    header = _with_bad_string(codec, RequestEnvelope(5, PingRequest(), traceparent="abc"), "abc")
    with pytest.raises(FrameError) as info:
        codec.decode_request([PROTOCOL_ID, header])
    assert info.value.error.code == ResponseCode.INVALID_PARAMETER
    assert info.value.request_id == 5
    assert "UTF-8" in info.value.error.message


def test_invalid_utf8_in_body_field_keeps_the_id_and_names_the_request(
    codec: RequestCodec,
) -> None:
    env = RequestEnvelope(11, PullMessageRequest("grp", "Top", 0, 0, 32))
    header = _with_bad_string(codec, env, "Top")
    with pytest.raises(FrameError) as info:
        codec.decode_request([PROTOCOL_ID, header])
    assert info.value.error.code == ResponseCode.INVALID_PARAMETER
    assert info.value.request_id == 11
    assert "'pull'" in info.value.error.message


@pytest.mark.parametrize(
    "header",
    [
        # the type tag itself is not UTF-8
        msgspec.msgpack.encode({"id": 1, "body": {"t": "x"}}).replace(b"\xa1x", b"\xa1\xff"),
        # a map key is not UTF-8
        msgspec.msgpack.encode({"id": 1, "ab": 2}).replace(b"ab", b"\xff\xfe"),
        # the bad string is the only content
        b"\xa3" + BAD_UTF8,
        # nested deeper than any decoder recurses
        b"\x91" * 100_000 + b"\x00",
        # an ext type where a map belongs, a timestamp ext out of range
        b"\xd4\x01\x00",
        b"\xd7\xff" + b"\xff" * 8,
        # a string length past the end
        b"\xdb\xff\xff\xff\xff",
    ],
)
def test_malformed_headers_are_typed_errors(codec: RequestCodec, header: bytes) -> None:
    for decode in (codec.decode_request, codec.decode_reply):
        with pytest.raises(FrameError) as info:
            decode([PROTOCOL_ID, header])
        assert info.value.error.code in (ResponseCode.BAD_FRAME, ResponseCode.INVALID_PARAMETER)


def test_invalid_utf8_in_a_reply_is_a_frame_error(codec: RequestCodec) -> None:
    frames = codec.reply_frames([], 3, ErrorReply(code=1, message="abc"))
    header = frames[2].replace(b"abc", BAD_UTF8)
    with pytest.raises(FrameError) as info:
        codec.decode_reply([PROTOCOL_ID, header])
    assert info.value.request_id == 3


def _valid_headers() -> list[bytes]:
    codec = RequestCodec()
    return [
        codec.encode(RequestEnvelope(1, PingRequest(), traceparent="00-ab")),
        codec.encode(RequestEnvelope(2, SendMessageRequest("pg", "T", 3, count=2))),
        codec.encode(RequestEnvelope(3, PullMessageRequest("g", "T", 1, 5, 32))),
    ]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(_valid_headers())))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw) - 1))
        raw[at] = draw(st.integers(0, 255))
    return bytes(raw)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(header=st.one_of(st.binary(max_size=64), _mutated()))
def test_any_bytes_decode_or_raise_frame_error_only(header: bytes) -> None:
    codec = RequestCodec()
    for decode in (codec.decode_request, codec.decode_reply):
        failure: FrameError | None = None
        try:
            decode([PROTOCOL_ID, header])
        except FrameError as exc:
            failure = exc
        if failure is not None:
            assert failure.error.code in (
                ResponseCode.BAD_FRAME,
                ResponseCode.INVALID_PARAMETER,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            )
            # the error can always be sent back: its message encodes
            codec.encode(failure.error.message)


@settings(
    derandomize=True,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(frames=st.lists(st.binary(max_size=16), max_size=4))
def test_any_frame_list_raises_frame_error_only(frames: list[bytes]) -> None:
    codec = RequestCodec()
    with contextlib.suppress(FrameError):
        codec.decode_request(frames)
