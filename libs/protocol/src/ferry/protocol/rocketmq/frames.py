"""Splitting a TCP byte stream into RemotingCommand frames.

Each frame is an int32 length and that many bytes; FrameSplitter hands back the bytes after
the length, what ferry.protocol.rocketmq.decode takes. A length beyond the limit, or too
short to hold the header length, means the peer does not speak this protocol (or lies): the
splitter raises CommandError, and stays broken, and the connection should be closed.
"""

from __future__ import annotations

import struct

from ferry.protocol.rocketmq.command import CommandError

# RocketMQ's default frame limit (com.rocketmq.remoting.frameMaxLength), counted as Netty
# counts it: the 4-byte length included.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_LENGTH = struct.Struct(">i")


class FrameSplitter:
    """Fed chunks of one connection's stream in order; returns the frames they complete."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._pending = bytearray()
        self._error: CommandError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._pending)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The frames that data completes, each without its 4-byte length, in order."""
        if self._error is not None:
            raise self._error
        pending = self._pending
        if pending:
            pending += data
            source: bytes | bytearray | memoryview = pending
        else:
            source = data  # the common case, a chunk of whole frames: no copy into pending
        frames: list[bytes] = []
        at = 0
        size = len(source)
        while size - at >= 4:
            (length,) = _LENGTH.unpack_from(source, at)
            if length < 4 or length + 4 > self.max_frame_size:
                self._error = CommandError(
                    f"frame length {length} is outside 4..{self.max_frame_size - 4}"
                )
                raise self._error
            end = at + 4 + length
            if end > size:
                break
            frames.append(bytes(source[at + 4 : end]))
            at = end
        if source is pending:
            del pending[:at]
        elif at < size:
            pending += source[at:]
        return frames
