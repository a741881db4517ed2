import msgspec
import pytest

from ferry.protocol.codes import ResponseCode
from ferry.protocol.framing import FrameError, ReplyEnvelope, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ErrorReply,
    OkReply,
    PullMessageRequest,
    SendMessageRequest,
    reply_types,
    request_types,
    wire_tag,
)
from ferry.protocol.version import PROTOCOL_ID


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec()


def test_request_round_trips_with_payload_and_trace_context(codec: RequestCodec) -> None:
    env = RequestEnvelope(7, SendMessageRequest("pg", "T", 3, count=2), traceparent="00-ab-cd-01")
    frames = codec.request_frames(env, [b"records"])
    assert frames[0] == b"" and frames[1] == PROTOCOL_ID
    decoded, payload = codec.decode_request(frames[1:])
    assert decoded == env
    assert payload == [b"records"]


def test_reply_echoes_request_id(codec: RequestCodec) -> None:
    frames = codec.reply_frames([b"client-1"], 42, OkReply())
    assert frames[0] == b"client-1" and frames[1] == b""
    env, payload = codec.decode_reply(frames[2:])
    assert env == ReplyEnvelope(42, OkReply())
    assert payload == []


def test_tags_are_unique_across_requests_and_replies() -> None:
    tags = [wire_tag(t) for t in request_types() + reply_types()]
    assert len(tags) == len(set(tags))


def test_every_request_names_a_code() -> None:
    codes = [t.code for t in request_types()]
    assert len(codes) == len(set(codes))


def test_unknown_request_type_is_request_code_not_supported(codec: RequestCodec) -> None:
    header = msgspec.msgpack.encode({"id": 9, "body": {"t": "teleport"}})
    with pytest.raises(FrameError) as info:
        codec.decode_request([PROTOCOL_ID, header])
    assert info.value.error.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert info.value.request_id == 9


def test_missing_field_is_invalid_parameter_and_keeps_the_id(codec: RequestCodec) -> None:
    header = msgspec.msgpack.encode({"id": 3, "body": {"t": "pull", "topic": "T"}})
    with pytest.raises(FrameError) as info:
        codec.decode_request([PROTOCOL_ID, header])
    assert info.value.error.code == ResponseCode.INVALID_PARAMETER
    assert info.value.request_id == 3


@pytest.mark.parametrize(
    "frames",
    [
        [],
        [PROTOCOL_ID],
        [b"GARBAGE", b"x"],
        [PROTOCOL_ID, b"\xc1\xff not msgpack"],
        [PROTOCOL_ID, msgspec.msgpack.encode([1, 2, 3])],
    ],
)
def test_garbage_is_bad_frame(codec: RequestCodec, frames: list[bytes]) -> None:
    with pytest.raises(FrameError) as info:
        codec.decode_request(frames)
    assert info.value.error.code == ResponseCode.BAD_FRAME


def test_other_protocol_version_is_version_not_supported(codec: RequestCodec) -> None:
    with pytest.raises(FrameError) as info:
        codec.decode_request([b"FERRY/9", b"x"])
    assert info.value.error.code == ResponseCode.VERSION_NOT_SUPPORTED


def test_unknown_fields_are_ignored_for_forward_compatibility(codec: RequestCodec) -> None:
    header = msgspec.msgpack.encode(
        {
            "id": 1,
            "future": True,
            "body": {
                "t": "pull",
                "consumer_group": "g",
                "topic": "T",
                "queue_id": 0,
                "queue_offset": 5,
                "new_field": [1, 2],
            },
        }
    )
    env, _ = codec.decode_request([PROTOCOL_ID, header])
    assert env.body == PullMessageRequest("g", "T", 0, 5)


def test_error_reply_decodes(codec: RequestCodec) -> None:
    frames = codec.reply_frames([], 5, ErrorReply(code=17, message="no topic", retriable=True))
    env, _ = codec.decode_reply(frames[1:])
    assert env.body == ErrorReply(17, "no topic", True)
