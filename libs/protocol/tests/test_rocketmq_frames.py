"""FrameSplitter: a TCP stream cut anywhere gives back the frames whole, in order; a length
the protocol cannot have stops it."""

from __future__ import annotations

import struct

import pytest

from ferry.protocol.rocketmq import (
    DEFAULT_MAX_FRAME_SIZE,
    CommandError,
    FrameSplitter,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
)


def _commands(n: int) -> list[RemotingCommand]:
    return [
        RemotingCommand(
            code=10 + i % 3,
            opaque=i,
            ext_fields={"topic": f"T{i}", "queueId": str(i % 4)},
            body=bytes([i % 256]) * (i * 7 % 300),
            serialize_type=SerializeType(i % 2),
        )
        for i in range(n)
    ]


def test_one_byte_chunks_give_every_frame_once_in_order() -> None:
    cmds = _commands(20)
    stream = b"".join(encode(c) for c in cmds)
    splitter = FrameSplitter()
    frames: list[bytes] = []
    for i in range(len(stream)):
        frames += splitter.feed(stream[i : i + 1])
    assert [decode(f) for f in frames] == cmds
    assert splitter.buffered == 0


def test_many_frames_in_one_chunk() -> None:
    cmds = _commands(500)
    splitter = FrameSplitter()
    frames = splitter.feed(b"".join(encode(c) for c in cmds))
    assert [decode(f) for f in frames] == cmds
    assert splitter.buffered == 0


def test_chunks_cut_across_frames_keep_the_rest_for_later() -> None:
    cmds = _commands(50)
    stream = b"".join(encode(c) for c in cmds)
    splitter = FrameSplitter()
    frames: list[bytes] = []
    at = 0
    for size in [3, 1, 4, 100, 7, 1000, 2, 333] * 100:
        chunk = memoryview(stream)[at : at + size]
        at += size
        frames += splitter.feed(chunk)
        if at >= len(stream):
            break
    assert [decode(f) for f in frames] == cmds


def test_partial_frame_is_held_until_complete() -> None:
    frame = encode(RemotingCommand(code=10, body=b"x" * 50))
    splitter = FrameSplitter()
    assert splitter.feed(frame[:-1]) == []
    assert splitter.buffered == len(frame) - 1
    assert splitter.feed(frame[-1:]) == [frame[4:]]
    assert splitter.buffered == 0


def test_default_limit_is_rocketmqs_16_mib_with_the_length_counted() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 16777216
    splitter = FrameSplitter()
    assert splitter.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE - 4)) == []  # fits: waits
    with pytest.raises(CommandError, match="frame length 16777213"):
        FrameSplitter().feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE - 3))


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 3, 2**31 - 1, 1001])
def test_length_outside_bounds_raises_and_the_splitter_stays_broken(length: int) -> None:
    splitter = FrameSplitter(max_frame_size=1004)
    good = encode(RemotingCommand(code=1))
    with pytest.raises(CommandError, match=f"frame length {length} is outside 4..1000"):
        # the good frame before the bad length is not returned: the connection is closing
        splitter.feed(good + struct.pack(">i", length))
    with pytest.raises(CommandError):
        splitter.feed(good)


def test_length_of_exactly_the_limit_is_accepted() -> None:
    splitter = FrameSplitter(max_frame_size=100)
    frame = struct.pack(">i", 96) + struct.pack(">i", 0) + b"\x00" * 92
    assert splitter.feed(frame) == [frame[4:]]
