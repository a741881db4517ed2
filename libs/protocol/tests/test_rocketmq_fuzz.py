"""Whatever bytes arrive, decode() returns a command or raises CommandError, and a decoded
command encodes and decodes to itself; the splitter raises nothing else either."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.protocol.rocketmq import (
    CommandError,
    FrameSplitter,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
)

_text = st.text(max_size=40)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i16 = st.integers(-(2**15), 2**15 - 1)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    kind = draw(st.sampled_from(SerializeType))
    small = kind is SerializeType.ROCKETMQ  # code and version are int16 there
    return RemotingCommand(
        code=draw(_i16 if small else _i32),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(_i16 if small else _i32),
        opaque=draw(_i32),
        flag=draw(_i32),
        remark=draw(_text),
        ext_fields=draw(st.dictionaries(_text, _text, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=kind,
    )


@given(commands())
@settings(max_examples=300, deadline=None)
def test_any_command_round_trips(cmd: RemotingCommand) -> None:
    # st.text() draws no lone surrogates, so every drawn command is encodable
    assert decode(encode(cmd)[4:]) == cmd


def _decode_or_error(frame: bytes) -> None:
    try:
        cmd = decode(frame)
    except CommandError:
        return
    # a command that decoded is a valid one: it survives its own round trip
    again = decode(encode(cmd)[4:])
    assert again == cmd


@given(st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_random_bytes_decode_or_raise_command_error(frame: bytes) -> None:
    _decode_or_error(frame)


@given(st.integers(0, 1), st.binary(max_size=120), st.binary(max_size=20))
@settings(max_examples=300, deadline=None)
def test_random_headers_of_true_length_decode_or_raise_command_error(
    kind: int, header: bytes, body: bytes
) -> None:
    _decode_or_error(struct.pack(">i", (kind << 24) | len(header)) + header + body)


@given(commands(), st.data())
@settings(max_examples=300, deadline=None)
def test_mutated_valid_frames_decode_or_raise_command_error(
    cmd: RemotingCommand, data: st.DataObject
) -> None:
    try:
        frame = bytearray(encode(cmd)[4:])
    except CommandError:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "cut", "insert", "length"]))
        at = data.draw(st.integers(0, max(len(frame) - 1, 0)))
        if how == "flip" and frame:
            frame[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del frame[at:]
        elif how == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif how == "length" and len(frame) >= at + 4:
            struct.pack_into(">i", frame, at, data.draw(_i32))
    _decode_or_error(bytes(frame))


@given(st.lists(st.binary(max_size=40), max_size=20))
@settings(max_examples=300, deadline=None)
def test_splitter_on_random_chunks_returns_frames_or_raises_command_error(
    chunks: list[bytes],
) -> None:
    splitter = FrameSplitter(max_frame_size=256)
    total = 0
    try:
        for chunk in chunks:
            for frame in splitter.feed(chunk):
                total += 4 + len(frame)
                assert 4 <= len(frame) <= 252
    except CommandError:
        return
    assert total + splitter.buffered == sum(map(len, chunks))
